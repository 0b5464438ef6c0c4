//! Bearer tokens → principals and roles (SPEC §6).
//!
//! The token file has one token per line: `TOKEN PRINCIPAL ROLE`, where ROLE is `admin`,
//! `client` or `peer`; blank lines and lines starting with `#` are skipped. Clients send
//! `authorization: Bearer TOKEN`. Nodes call each other's internal `Raft` service with the
//! file's `peer` token, which that service requires and the client API refuses: a client
//! cannot hand a node a command in someone else's name. Every node reads the same file.
//! Without a token file auth is off: every caller is the principal `anonymous` with the admin
//! role, and the internal service is open; a node refuses to run so on a non-loopback
//! address unless told `--insecure` (`Config::validate`).
//!
//! The callers are checked from the request headers alone, before any body is read
//! (`grpc::gate`). The table is keyed by each token's SHA-256, so a lookup's timing says
//! nothing about how much of a guessed token was right.

use std::collections::HashMap;
use std::path::Path;

use anyhow::Context;
use sha2::{Digest, Sha256};

use crate::error::ApiError;
use crate::lease::history::SYSTEM_ACTOR;
use crate::lease::policy;
use crate::lease::Rejection;

/// The principal of every caller when auth is off (held to the quotas, SPEC §4.17).
pub use crate::lease::quota::ANONYMOUS;

/// The shortest token a node accepts (unless `--insecure`): 32 bytes, e.g. `openssl rand
/// -hex 16` or more.
pub const MIN_TOKEN_BYTES: usize = 32;

/// Who is calling, as the state machine needs to know it. The auth gate puts it in each
/// client request's extensions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub principal: String,
    pub admin: bool,
}

/// The token a client call presented (its digest), put in the request's extensions by the
/// auth gate: a stream it opened ends when a reload revokes it ([`Auth::admits`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credential {
    digest: TokenDigest,
    /// Who the token stood for when the call was admitted.
    caller: Caller,
}

/// Put in a request's extensions by the auth gate once the caller proved to be a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCall;

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

type TokenDigest = [u8; 32];

fn token_digest(token: &[u8]) -> TokenDigest {
    Sha256::digest(token).into()
}

#[derive(Clone, Debug, Default)]
pub struct Auth {
    /// None = auth off. Keyed by the token's SHA-256.
    tokens: Option<HashMap<TokenDigest, Entry>>,
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

    /// Whether `principal` has a client or admin token here, and so may hold leases (with auth
    /// off, every name does: all callers are `anonymous`). A node's principal (role `peer`)
    /// calls nothing that holds a lease.
    pub fn may_hold(&self, principal: &str) -> bool {
        self.tokens.as_ref().is_none_or(|tokens| {
            tokens
                .values()
                .any(|e| e.principal == principal && e.role != Role::Peer)
        })
    }

    /// Reads the token file. Unless `insecure`, a file that group or others may read and a
    /// token shorter than [`MIN_TOKEN_BYTES`] are refused.
    pub fn load(path: &Path, insecure: bool) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading token file {}", path.display()))?;
        if !insecure {
            let metadata = std::fs::metadata(path)?;
            anyhow::ensure!(
                private(&metadata),
                "token file {} has mode {:o}: others, and a group other than this process's \
                 own, must not read it (chmod 600 {}), or pass --insecure",
                path.display(),
                std::os::unix::fs::PermissionsExt::mode(&metadata.permissions()) & 0o777,
                path.display()
            );
        }
        Self::parse_checked(&text, insecure)
            .with_context(|| format!("in token file {}", path.display()))
    }

    /// Parses a token file's text, without the length rule (tests).
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        Self::parse_checked(text, true)
    }

    fn parse_checked(text: &str, short_tokens: bool) -> anyhow::Result<Self> {
        let mut tokens = HashMap::new();
        let mut peer_token: Option<&str> = None;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [token, principal, role] = fields[..] else {
                anyhow::bail!("line {}: expected `TOKEN PRINCIPAL ROLE`", n + 1);
            };
            anyhow::ensure!(
                short_tokens || token.len() >= MIN_TOKEN_BYTES,
                "line {}: the token has {} bytes; at least {MIN_TOKEN_BYTES} are needed \
                 (e.g. `openssl rand -hex 32`), or pass --insecure",
                n + 1,
                token.len()
            );
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
            if role == Role::Peer {
                // The lexically first peer token, so every node reading the same file
                // picks the same.
                peer_token = Some(peer_token.map_or(token, |t| t.min(token)));
            }
            let entry = Entry {
                principal: principal.to_string(),
                role,
            };
            anyhow::ensure!(
                tokens
                    .insert(token_digest(token.as_bytes()), entry)
                    .is_none(),
                "line {}: token appears twice",
                n + 1
            );
        }
        let peer_token = peer_token.map(str::to_string);
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
    fn presented(
        &self,
        headers: &http::HeaderMap,
    ) -> Result<Option<(TokenDigest, &Entry)>, ApiError> {
        let Some(tokens) = &self.tokens else {
            return Ok(None);
        };
        let header = headers
            .get(http::header::AUTHORIZATION)
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
        let digest = token_digest(token.as_bytes());
        tokens
            .get(&digest)
            .map(|entry| Some((digest, entry)))
            .ok_or_else(|| ApiError::Unauthenticated("unknown token".into()))
    }

    /// Feeds what every node must agree on into `hasher` (`crate::agreement`): whether auth
    /// is on, and the peer tokens (their digests, sorted). Client and admin tokens may differ
    /// while a new file is rolled out node by node.
    pub fn hash_into(&self, hasher: &mut Sha256) {
        let Some(tokens) = &self.tokens else {
            hasher.update(b"auth off");
            return;
        };
        let mut entries: Vec<_> = tokens
            .iter()
            .filter(|(_, e)| e.role == Role::Peer)
            .collect();
        entries.sort_by_key(|(digest, _)| **digest);
        for (digest, entry) in entries {
            hasher.update(digest);
            hasher.update((entry.principal.len() as u64).to_le_bytes());
            hasher.update(entry.principal.as_bytes());
            hasher.update([entry.role as u8]);
        }
    }

    /// Whether a token this table's predecessor admitted still stands here for the same
    /// principal and role.
    pub fn admits(&self, credential: &Credential) -> bool {
        self.tokens.as_ref().is_none_or(|tokens| {
            tokens.get(&credential.digest).is_some_and(|entry| {
                entry.principal == credential.caller.principal
                    && (entry.role == Role::Admin) == credential.caller.admin
                    && entry.role != Role::Peer
            })
        })
    }

    /// Admits a call to the internal `Raft` service: only with a `peer` token when auth is
    /// on; a client or admin token is `permission_denied`.
    pub fn check_peer(&self, headers: &http::HeaderMap) -> Result<(), ApiError> {
        match self.presented(headers)? {
            None => Ok(()),
            Some((_, entry)) if entry.role == Role::Peer => Ok(()),
            Some(_) => Err(Rejection::InsufficientPermissions(
                "the internal Raft service takes only a peer token".into(),
            )
            .into()),
        }
    }

    /// The caller of a request, from its `authorization: Bearer TOKEN` header.
    pub fn caller(&self, headers: &http::HeaderMap) -> Result<Caller, ApiError> {
        self.client(headers).map(|(caller, _)| caller)
    }

    /// The caller of a request and the token it presented (None when auth is off).
    pub fn client(
        &self,
        headers: &http::HeaderMap,
    ) -> Result<(Caller, Option<Credential>), ApiError> {
        match self.presented(headers)? {
            None => Ok((
                Caller {
                    principal: ANONYMOUS.into(),
                    admin: true,
                },
                None,
            )),
            Some((_, entry)) if entry.role == Role::Peer => Err(ApiError::Unauthenticated(
                "a peer token is for node-to-node calls only".into(),
            )),
            Some((digest, entry)) => {
                let caller = Caller {
                    principal: entry.principal.clone(),
                    admin: entry.role == Role::Admin,
                };
                let credential = Credential {
                    digest,
                    caller: caller.clone(),
                };
                Ok((caller, Some(credential)))
            }
        }
    }
}

/// The caller the auth gate found for `request`. A request that did not pass the gate has
/// none and is refused: the check fails closed.
pub fn caller_of<T>(request: &tonic::Request<T>) -> Result<Caller, ApiError> {
    caller_in(request.extensions())
}

/// [`caller_of`] for a request already taken apart.
pub fn caller_in(extensions: &tonic::Extensions) -> Result<Caller, ApiError> {
    extensions
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| ApiError::Unauthenticated("the caller was not authenticated".into()))
}

/// Whether a secret file is closed to everyone but this process's user and group: no bits for
/// others, and group bits only when the group is this process's own (as a Kubernetes Secret
/// volume is, which the kubelet opens to the pod's fsGroup).
fn private(metadata: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mode = metadata.permissions().mode();
    let own_group = metadata.gid() == rustix::process::getegid().as_raw();
    mode & 0o007 == 0 && (mode & 0o070 == 0 || own_group)
}

/// The token the auth gate found on a client call (None when auth is off).
pub fn credential_in(extensions: &tonic::Extensions) -> Option<Credential> {
    extensions.get::<Credential>().cloned()
}

/// Refuses a call to the internal service that the auth gate did not admit as a peer's.
pub fn peer_of<T>(request: &tonic::Request<T>) -> Result<(), ApiError> {
    match request.extensions().get::<PeerCall>() {
        Some(PeerCall) => Ok(()),
        None => Err(ApiError::Unauthenticated(
            "the caller was not authenticated as a peer".into(),
        )),
    }
}

#[cfg(test)]
mod tests;
