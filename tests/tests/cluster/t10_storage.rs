//! openraft's storage conformance suite against Tenure's sled log store and lease state
//! machine. (Durability counters are checked on a live cluster in t20.)

use std::sync::Arc;

use openraft::testing::log::{StoreBuilder, Suite};
use openraft::StorageError;
use tenure_node::store::log::LogStore;
use tenure_node::store::state_machine::StateMachineStore;
use tenure_node::store::{StorageStats, TypeConfig};

/// Builds the stores; `leader`: the log is node 0's, the id the suite's entries carry, so its
/// appends are synced by the journal's flusher thread, as a leader's are, not in `append`.
struct Builder {
    leader: bool,
}

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, tempfile::TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachineStore), StorageError<TypeConfig>> {
        let dir = tempfile::tempdir().expect("temp dir");
        let stats = Arc::new(StorageStats::default());
        let mut log = LogStore::open(&dir.path().join("raft"), stats.clone()).expect("open log");
        if self.leader {
            log = log.of_node(0);
        }
        let sm = StateMachineStore::open(dir.path().join("snapshots"), stats)
            .expect("open state machine");
        Ok((dir, log, sm))
    }
}

#[tokio::test]
async fn storage_passes_openraft_conformance_suite() -> Result<(), StorageError<TypeConfig>> {
    Suite::test_all(Builder { leader: false }).await
}

#[tokio::test]
async fn storage_passes_the_suite_with_appends_synced_by_the_flusher(
) -> Result<(), StorageError<TypeConfig>> {
    Suite::test_all(Builder { leader: true }).await
}
