//! Bearer tokens → principals and roles (SPEC §6).
//!
//! The token file has one token per line: `TOKEN PRINCIPAL ROLE`, where ROLE is `admin`,
//! `client` or `peer`; blank lines and lines starting with `#` are skipped. Clients send
//! `authorization: Bearer TOKEN`. Nodes call each other's internal `Raft` service with the
//! file's `peer` token, which that service requires and the client API refuses: a client
//! cannot hand a node a command in someone else's name. Every node reads the same file.
//! Without a token file auth is off: every caller is the principal `anonymous` with the admin
//! role, and the internal service is open.

use std::collections::HashMap;
use std::path::Path;

use anyhow::Context;
use tonic::metadata::MetadataMap;

use crate::error::ApiError;
use crate::lease::history::SYSTEM_ACTOR;
use crate::lease::policy;

/// The principal of every caller when auth is off.
pub const ANONYMOUS: &str = "anonymous";

/// Who is calling, as the state machine needs to know it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub principal: String,
    pub admin: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Admin,
    Client,
    Peer,
}

#[derive(Clone, Debug)]
struct Entry {
    principal: String,
    role: Role,
}

#[derive(Clone, Debug, Default)]
pub struct Auth {
    /// None = auth off.
    tokens: Option<HashMap<String, Entry>>,
    /// The token this node presents to its peers.
    peer_token: Option<String>,
}

impl Auth {
    /// Auth off: everyone is `anonymous`, an admin.
    pub fn off() -> Self {
        Auth::default()
    }

    /// The token to send on node-to-node calls (None when auth is off).
    pub fn peer_token(&self) -> Option<&str> {
        self.peer_token.as_deref()
    }

    pub fn is_on(&self) -> bool {
        self.tokens.is_some()
    }

    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading token file {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("in token file {}", path.display()))
    }

    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let mut tokens = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [token, principal, role] = fields[..] else {
                anyhow::bail!("line {}: expected `TOKEN PRINCIPAL ROLE`", n + 1);
            };
            let role = match role {
                "admin" => Role::Admin,
                "client" => Role::Client,
                "peer" => Role::Peer,
                other => anyhow::bail!(
                    "line {}: role `{other}` is not admin, client or peer",
                    n + 1
                ),
            };
            anyhow::ensure!(
                policy::valid_name(principal),
                "line {}: principal must be 1-128 bytes of [A-Za-z0-9_.:/-]",
                n + 1
            );
            anyhow::ensure!(
                ![ANONYMOUS, SYSTEM_ACTOR].contains(&principal),
                "line {}: `{principal}` is reserved (history shows it for {})",
                n + 1,
                if principal == ANONYMOUS {
                    "callers when auth is off"
                } else {
                    "reclaims"
                }
            );
            let entry = Entry {
                principal: principal.to_string(),
                role,
            };
            anyhow::ensure!(
                tokens.insert(token.to_string(), entry).is_none(),
                "line {}: token appears twice",
                n + 1
            );
        }
        // The lexically first peer token, so every node reading the same file picks the same.
        let peer_token = tokens
            .iter()
            .filter(|(_, e)| e.role == Role::Peer)
            .map(|(t, _)| t.clone())
            .min();
        anyhow::ensure!(
            peer_token.is_some(),
            "no `peer` token: nodes need one for their calls to each other"
        );
        anyhow::ensure!(
            tokens.values().any(|e| e.role != Role::Peer),
            "no admin or client token"
        );
        Ok(Auth {
            tokens: Some(tokens),
            peer_token,
        })
    }

    /// The token a request presents, and what the file says of it.
    fn presented(&self, metadata: &MetadataMap) -> Result<Option<&Entry>, ApiError> {
        let Some(tokens) = &self.tokens else {
            return Ok(None);
        };
        let header = metadata
            .get("authorization")
            .ok_or_else(|| ApiError::Unauthenticated("missing bearer token".into()))?;
        let token = header
            .to_str()
            .ok()
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .ok_or_else(|| {
                ApiError::Unauthenticated("authorization is not `Bearer TOKEN`".into())
            })?;
        tokens
            .get(token)
            .map(Some)
            .ok_or_else(|| ApiError::Unauthenticated("unknown token".into()))
    }

    /// Admits a call to the internal `Raft` service: only with a `peer` token when auth is on.
    pub fn check_peer(&self, metadata: &MetadataMap) -> Result<(), ApiError> {
        match self.presented(metadata)? {
            None => Ok(()),
            Some(entry) if entry.role == Role::Peer => Ok(()),
            Some(_) => Err(ApiError::Unauthenticated(
                "the internal Raft service takes only a peer token".into(),
            )),
        }
    }

    /// The caller of a request, from its `authorization: Bearer TOKEN` header.
    pub fn caller(&self, metadata: &MetadataMap) -> Result<Caller, ApiError> {
        match self.presented(metadata)? {
            None => Ok(Caller {
                principal: ANONYMOUS.into(),
                admin: true,
            }),
            Some(entry) if entry.role == Role::Peer => Err(ApiError::Unauthenticated(
                "a peer token is for node-to-node calls only".into(),
            )),
            Some(entry) => Ok(Caller {
                principal: entry.principal.clone(),
                admin: entry.role == Role::Admin,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_header(value: &str) -> MetadataMap {
        let mut m = MetadataMap::new();
        m.insert("authorization", value.parse().expect("ascii"));
        m
    }

    #[test]
    fn tokens_map_to_principals_and_roles() {
        let auth = Auth::parse(
            "# comment\n\ns3cret-a alice admin\ns3cret-b bob client\np33r-1 nodes peer\n",
        )
        .expect("parses");
        let alice = auth.caller(&with_header("Bearer s3cret-a")).expect("alice");
        assert_eq!((alice.principal.as_str(), alice.admin), ("alice", true));
        let bob = auth.caller(&with_header("Bearer s3cret-b")).expect("bob");
        assert_eq!((bob.principal.as_str(), bob.admin), ("bob", false));
    }

    #[test]
    fn missing_malformed_and_unknown_tokens_are_unauthenticated() {
        let auth = Auth::parse("t1 alice admin\np1 nodes peer").expect("parses");
        for metadata in [
            MetadataMap::new(),
            with_header("t1"),
            with_header("Basic t1"),
            with_header("Bearer nope"),
        ] {
            let err = auth.caller(&metadata).expect_err("refused");
            assert_eq!(err.reason_and_code().0, "unauthenticated");
        }
    }

    #[test]
    fn only_peer_tokens_reach_the_internal_service_and_never_the_client_api() {
        let auth = Auth::parse("t1 alice admin\np2 nodes peer\np1 nodes peer").expect("parses");
        assert_eq!(auth.peer_token(), Some("p1"), "every node picks the same");
        assert!(auth.check_peer(&with_header("Bearer p1")).is_ok());
        assert!(auth.check_peer(&with_header("Bearer p2")).is_ok());
        for refused in [MetadataMap::new(), with_header("Bearer t1")] {
            let err = auth.check_peer(&refused).expect_err("not a peer");
            assert_eq!(err.reason_and_code().0, "unauthenticated");
        }
        let err = auth
            .caller(&with_header("Bearer p1"))
            .expect_err("peer as client");
        assert_eq!(err.reason_and_code().0, "unauthenticated");
        assert!(Auth::off().check_peer(&MetadataMap::new()).is_ok());
    }

    #[test]
    fn auth_off_makes_everyone_an_anonymous_admin() {
        let caller = Auth::off().caller(&MetadataMap::new()).expect("anyone");
        assert_eq!(caller.principal, ANONYMOUS);
        assert!(caller.admin);
    }

    #[test]
    fn bad_token_files_are_refused_with_the_line() {
        for text in [
            "t1 alice",
            "t1 alice root",
            "t1 al!ce admin",
            "t a admin\nt b client",
            "",
        ] {
            assert!(Auth::parse(text).is_err(), "{text:?}");
        }
    }
}
