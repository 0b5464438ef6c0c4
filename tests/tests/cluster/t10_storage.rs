//! openraft's storage conformance suite against Tenure's sled log store and lease state
//! machine. (Durability counters are checked on a live cluster in t20.)

use std::sync::Arc;

use openraft::testing::log::{StoreBuilder, Suite};
use openraft::StorageError;
use tenure_node::store::log::LogStore;
use tenure_node::store::state_machine::StateMachineStore;
use tenure_node::store::{StorageStats, TypeConfig};

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, tempfile::TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachineStore), StorageError<TypeConfig>> {
        let dir = tempfile::tempdir().expect("temp dir");
        let stats = Arc::new(StorageStats::default());
        let log = LogStore::open(&dir.path().join("raft"), stats.clone()).expect("open log");
        let sm = StateMachineStore::open(dir.path().join("snapshots"), stats)
            .expect("open state machine");
        Ok((dir, log, sm))
    }
}

#[tokio::test]
async fn storage_passes_openraft_conformance_suite() -> Result<(), StorageError<TypeConfig>> {
    Suite::test_all(Builder).await
}
