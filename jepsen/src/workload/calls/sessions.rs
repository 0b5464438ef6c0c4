//! The calls on sessions (SPEC §4.24): create, renew, close. Each session has a holder of its
//! own (`c3.s2`: client 3's second session), so the leases of a session are its holder's.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tenure_client::{pb, prost_duration, Reason};

use super::{classify, Env};
use crate::history::{Call, Ended, Outcome, Value};

/// A session a client created, as the client knows it.
pub struct SessionRef {
    pub id: String,
    pub holder: String,
    pub ttl_ms: u64,
    /// The invocation of its creation, or of the latest renewal answered ok: it lives at least
    /// until then + ttl (on the cluster's clock) unless it is closed.
    alive_ns: AtomicU64,
    /// A call was told `session_not_found`, or the session was closed: it is over.
    ended: AtomicBool,
}

impl SessionRef {
    pub fn alive_ns(&self) -> u64 {
        self.alive_ns.load(Ordering::Acquire)
    }

    pub fn ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// What an answer to a call naming the session shows of it.
    pub(super) fn learn(&self, outcome: &Outcome) {
        if let Outcome::Fail { reason } = outcome {
            if Reason::SessionNotFound == reason.as_str() {
                self.ended.store(true, Ordering::Release);
            }
        }
    }
}

impl Env {
    /// `CreateSession` for `holder` with `ttl_ms`; the session if created.
    pub async fn create_session(
        &self,
        process: u64,
        holder: &str,
        ttl_ms: u64,
    ) -> Option<SessionRef> {
        let call = Call::CreateSession {
            holder: holder.into(),
            ttl_ms,
        };
        let pending = self.recorder.invoke(process, call);
        let invoked = pending.invoke_ns();
        let request = pb::CreateSessionRequest {
            holder: holder.into(),
            ttl: Some(prost_duration(Duration::from_millis(ttl_ms))),
            ..Default::default()
        };
        let outcome = match self.client.create_session(request).await {
            Ok(r) => match r.session {
                Some(session) => Outcome::Ok {
                    value: Value::Session {
                        session_id: session.session_id,
                    },
                },
                None => Outcome::Unknown {
                    error: "created without a session".into(),
                },
            },
            Err(e) => classify(&e),
        };
        match self.recorder.complete(pending, outcome) {
            Outcome::Ok {
                value: Value::Session { session_id },
            } => Some(SessionRef {
                id: session_id,
                holder: holder.into(),
                ttl_ms,
                alive_ns: AtomicU64::new(invoked),
                ended: AtomicBool::new(false),
            }),
            _ => None,
        }
    }

    /// `RenewSession` of `session`.
    pub async fn renew_session(&self, process: u64, session: &SessionRef) -> Outcome {
        let call = Call::RenewSession {
            holder: session.holder.clone(),
            session_id: session.id.clone(),
            ttl_ms: session.ttl_ms,
        };
        let pending = self.recorder.invoke(process, call);
        let invoked = pending.invoke_ns();
        let outcome = match self.client.renew_session(&session.id).await {
            Ok(_) => Outcome::Ok {
                value: Value::SessionRenewed,
            },
            Err(e) => classify(&e),
        };
        let outcome = self.recorder.complete(pending, outcome);
        if let Outcome::Ok { .. } = outcome {
            session.alive_ns.fetch_max(invoked, Ordering::AcqRel);
        }
        session.learn(&outcome);
        outcome
    }

    /// `CloseSession` of `session`: its leases end, its waits are cancelled.
    pub async fn close_session(&self, process: u64, session: &SessionRef) -> Outcome {
        let call = Call::CloseSession {
            holder: session.holder.clone(),
            session_id: session.id.clone(),
        };
        let pending = self.recorder.invoke(process, call);
        let outcome = match self.client.close_session(&session.id).await {
            Ok(r) => Outcome::Ok {
                value: Value::SessionClosed {
                    leases: r
                        .session
                        .map(|s| s.leases)
                        .unwrap_or_default()
                        .into_iter()
                        .map(|l| Ended {
                            resource: l.resource,
                            token: l.fencing_token,
                        })
                        .collect(),
                },
            },
            Err(e) => classify(&e),
        };
        session.ended.store(true, Ordering::Release);
        self.recorder.complete(pending, outcome)
    }
}
