//! The clusters most tests start: `n` in-process nodes that have agreed on a leader, open or
//! with a token file of named principals. One election bound for every test.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::in_process::InProcessCluster;

/// How long a test waits for a cluster to agree on a leader (after a start, a kill, a
/// membership change), and the bound on other waits that last about as long as an election.
pub const ELECTION: Duration = Duration::from_secs(20);

/// The token of `root`, an admin, in a [`secure`] cluster's token file.
pub const ADMIN: &str = "tests-admin-secret-0123456789abcdef";
/// The token of `alice`, a client.
pub const ALICE: &str = "tests-alice-secret-0123456789abcdef";
/// The token of `bob`, a client.
pub const BOB: &str = "tests-bob-secret-0123456789abcdef01";
/// The token of `nodes`, the peers.
pub const PEER: &str = "tests-peer-secret-0123456789abcdef0";

/// `n` in-process nodes that agree on a leader, and the leader's id.
pub async fn started(n: u64) -> (InProcessCluster, u64) {
    started_with(n, BTreeMap::new()).await
}

/// [`started`] with extra command-line flags per node id ([`crate::same_flags`] gives every
/// node the same).
pub async fn started_with(n: u64, extra: BTreeMap<u64, Vec<String>>) -> (InProcessCluster, u64) {
    let cluster = InProcessCluster::start(n, extra).await.expect("cluster");
    let leader = cluster.leader(ELECTION).await.expect("a leader");
    (cluster, leader)
}

/// [`started`] with auth on: every node reads one token file of [`ADMIN`] (`root`, admin),
/// [`ALICE`] and [`BOB`] (`alice`, `bob`, clients) and [`PEER`] (`nodes`, peer), and takes
/// the flags `more` besides. The file lives as long as the cluster.
pub async fn secure(n: u64, more: &[&str]) -> (InProcessCluster, u64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("tokens");
    crate::write_secret(
        &path,
        &format!("{ADMIN} root admin\n{ALICE} alice client\n{BOB} bob client\n{PEER} nodes peer\n"),
    );
    let mut flags = vec!["--token-file".to_string(), path.display().to_string()];
    flags.extend(more.iter().map(|flag| flag.to_string()));
    let (mut cluster, leader) = started_with(n, crate::same_flags(n, &flags)).await;
    cluster.keep(dir);
    (cluster, leader)
}
