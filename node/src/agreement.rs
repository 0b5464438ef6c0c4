//! One cluster, one configuration: every call a node makes to a peer carries a digest of the
//! settings all members must share — whether auth is on and the peer tokens (a node with auth
//! off, or another peer token, would be an open door) and `--require-registration` (which
//! changes what apply does) — and a node refuses the calls of a peer whose digest differs
//! (`config_mismatch`), logs it once per peer and digest, and lists it in `Cluster.Status`.
//! A peer of an earlier release sends no digest and is taken.
//!
//! Client and admin tokens are not in the digest: a new token file is rolled out node by node
//! (each reloaded with SIGHUP) without the nodes refusing each other meanwhile. A change of
//! peer token takes a restart anyway.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::auth::Auth;

/// The header that carries the sender's digest on every call to a peer.
pub const DIGEST_HEADER: &str = "tenure-config-digest";
/// The header that carries the sender's node id on every call to a peer.
pub const FROM_HEADER: &str = "tenure-raft-from";

/// The header that carries the sender's Raft protocol ([`RAFT_PROTOCOL`]) on every call to a
/// peer.
pub const PROTOCOL_HEADER: &str = "tenure-raft-protocol";

/// What nodes speak to each other: openraft 0.10's messages (protocol 2). Releases on openraft
/// 0.9 spoke protocol 1 and sent no protocol header; the two do not mix in one cluster (0.10's
/// vote request has a field more), so a node refuses a peer of the other protocol by name, and
/// the protocol is part of the digest, which makes a node of protocol 1 refuse this one too.
/// Upgrading a cluster across protocols: stop every node, then start them all on the new
/// release (docs/operations.md).
pub const RAFT_PROTOCOL: &str = "2";

/// How many refused peers are remembered (the oldest go first).
const REMEMBERED: usize = 64;

/// The digest of what every member must share, as 32 hex digits: the peer tokens, the Raft
/// protocol, `--require-registration` and `--ad-hoc-bookable` (hashed only when on).
pub fn digest(auth: &Auth, require_registration: bool, ad_hoc_bookable: bool) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"tenure configuration 1\n");
    hasher.update([u8::from(require_registration)]);
    hasher.update(format!("raft protocol {RAFT_PROTOCOL}\n"));
    if ad_hoc_bookable {
        hasher.update(b"ad-hoc-bookable\n");
    }
    auth.hash_into(&mut hasher);
    hasher.finalize()[..16]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// Peers refused for a digest that differs, by who they said they were.
#[derive(Debug, Default)]
pub struct Mismatches(Mutex<BTreeMap<String, (String, Instant)>>);

impl Mismatches {
    /// Records that `peer` sent `theirs`; true when that is news (worth a log line).
    pub fn record(&self, peer: &str, theirs: &str) -> bool {
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let news = seen.get(peer).is_none_or(|(digest, _)| digest != theirs);
        seen.insert(peer.to_string(), (theirs.to_string(), Instant::now()));
        if seen.len() > REMEMBERED {
            let oldest = seen
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(peer, _)| peer.clone());
            if let Some(oldest) = oldest {
                seen.remove(&oldest);
            }
        }
        news
    }

    /// The peers refused within `within`, as `PEER: digest D, Ns ago`.
    pub fn recent(&self, within: Duration) -> Vec<String> {
        let seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        seen.iter()
            .filter(|(_, (_, at))| at.elapsed() <= within)
            .map(|(peer, (digest, at))| {
                format!("{peer}: digest {digest}, {}s ago", at.elapsed().as_secs())
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_follows_the_peer_tokens_and_require_registration_only() {
        let tokens = Auth::parse("a alice admin\nb bob client\np nodes peer").expect("parses");
        let reordered = Auth::parse("p nodes peer\nb bob client\na alice admin").expect("parses");
        assert_eq!(
            digest(&tokens, false, false),
            digest(&reordered, false, false)
        );
        assert_ne!(digest(&tokens, false, false), digest(&tokens, true, false));
        // Client and admin tokens may differ; the peer token may not.
        let other_clients = Auth::parse("c carol admin\np nodes peer").expect("ok");
        assert_eq!(
            digest(&tokens, false, false),
            digest(&other_clients, false, false)
        );
        let other_peer = Auth::parse("a alice admin\nb bob client\nq nodes peer").expect("ok");
        assert_ne!(
            digest(&tokens, false, false),
            digest(&other_peer, false, false)
        );
        assert_ne!(
            digest(&tokens, false, false),
            digest(&Auth::off(), false, false)
        );
        assert_eq!(digest(&tokens, false, false).len(), 32);
        assert_ne!(digest(&tokens, false, false), digest(&tokens, false, true));
        // Off, `--ad-hoc-bookable` leaves the digest as it is without the setting.
        let mut before = Sha256::new();
        before.update(b"tenure configuration 1\n");
        before.update([0]);
        before.update(b"raft protocol 2\n");
        tokens.hash_into(&mut before);
        let before: String = before.finalize()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(digest(&tokens, false, false), before);
    }

    #[test]
    fn a_mismatch_is_news_once_per_peer_and_digest() {
        let seen = Mismatches::default();
        assert!(seen.record("node 3", "aa"));
        assert!(!seen.record("node 3", "aa"));
        assert!(seen.record("node 3", "bb"));
        assert_eq!(seen.recent(Duration::from_secs(60)).len(), 1);
        for n in 0..100 {
            seen.record(&format!("node {n}"), "cc");
        }
        assert!(seen.recent(Duration::from_secs(60)).len() <= REMEMBERED);
    }
}
