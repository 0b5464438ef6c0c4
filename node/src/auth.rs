//! Bearer tokens → principals and roles (SPEC §6).
//!
//! The token file has one token per line: `TOKEN PRINCIPAL ROLE`, where ROLE is `admin` or
//! `client`; blank lines and lines starting with `#` are skipped. Clients send
//! `authorization: Bearer TOKEN`. Without a token file auth is off: every caller is the
//! principal `anonymous` with the admin role.

use std::collections::HashMap;
use std::path::Path;

use anyhow::Context;
use tonic::metadata::MetadataMap;

use crate::error::ApiError;
use crate::lease::policy;

/// The principal of every caller when auth is off.
pub const ANONYMOUS: &str = "anonymous";

/// Who is calling, as the state machine needs to know it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub principal: String,
    pub admin: bool,
}

#[derive(Clone, Debug, Default)]
pub struct Auth {
    /// None = auth off.
    tokens: Option<HashMap<String, Caller>>,
}

impl Auth {
    /// Auth off: everyone is `anonymous`, an admin.
    pub fn off() -> Self {
        Auth { tokens: None }
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
            let admin = match role {
                "admin" => true,
                "client" => false,
                other => anyhow::bail!("line {}: role `{other}` is not admin or client", n + 1),
            };
            anyhow::ensure!(
                policy::valid_name(principal),
                "line {}: principal must be 1-128 bytes of [A-Za-z0-9_.:/-]",
                n + 1
            );
            let caller = Caller {
                principal: principal.to_string(),
                admin,
            };
            anyhow::ensure!(
                tokens.insert(token.to_string(), caller).is_none(),
                "line {}: token appears twice",
                n + 1
            );
        }
        anyhow::ensure!(!tokens.is_empty(), "no tokens");
        Ok(Auth {
            tokens: Some(tokens),
        })
    }

    /// The caller of a request, from its `authorization: Bearer TOKEN` header.
    pub fn caller(&self, metadata: &MetadataMap) -> Result<Caller, ApiError> {
        let Some(tokens) = &self.tokens else {
            return Ok(Caller {
                principal: ANONYMOUS.into(),
                admin: true,
            });
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
            .cloned()
            .ok_or_else(|| ApiError::Unauthenticated("unknown token".into()))
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
        let auth = Auth::parse("# comment\n\ns3cret-a alice admin\ns3cret-b bob client\n")
            .expect("parses");
        let alice = auth.caller(&with_header("Bearer s3cret-a")).expect("alice");
        assert_eq!((alice.principal.as_str(), alice.admin), ("alice", true));
        let bob = auth.caller(&with_header("Bearer s3cret-b")).expect("bob");
        assert_eq!((bob.principal.as_str(), bob.admin), ("bob", false));
    }

    #[test]
    fn missing_malformed_and_unknown_tokens_are_unauthenticated() {
        let auth = Auth::parse("t1 alice admin").expect("parses");
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
