//! Who leads a key, as it changes: a linearizable read of the key first, then its `Watch`
//! from that read's revision, resumed from the last revision after a node fails and re-read
//! when the history it needs was `compacted`. Candidates and bystanders alike can follow it.

use std::collections::VecDeque;

use futures::stream::BoxStream;
use futures::StreamExt;
use tenure_proto::contract::Reason;
use tenure_proto::v1 as pb;

use crate::client::Client;
use crate::error::Error;
use crate::retry::Reconnects;
use crate::watch::WatchMessages;

/// A leader of a key: the holder of its exclusive lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// The leading candidate's id.
    pub holder: String,
    /// The leadership's fencing token: stamp every write made as leader with it.
    pub fencing_token: u64,
    /// The id of the lease behind the leadership.
    pub lease_id: String,
}

/// The leaders of a key: the current one (`None`: nobody leads), then each change, in log
/// order. Ends after yielding an error that retrying cannot cure (a bad key name, …).
pub type Leaders = BoxStream<'static, Result<Option<Leader>, Error>>;

/// The events that change a key's leader.
const LEADERSHIP_EVENTS: [pb::EventType; 5] = [
    pb::EventType::Acquired,
    pb::EventType::Admitted,
    pb::EventType::Transferred,
    pb::EventType::Released,
    pb::EventType::Reclaimed,
];

struct Observer {
    client: Client,
    key: String,
    /// The last leader yielded; `None` before the first.
    reported: Option<Option<Leader>>,
    /// The leader after the last event applied.
    leader: Option<Leader>,
    events: Option<WatchMessages>,
    pending: VecDeque<Option<Leader>>,
    reconnects: Reconnects,
    ended: bool,
}

impl Client {
    /// The leaders of `key` (see [`Leaders`]). Consecutive duplicates are never yielded; a
    /// release and the admission it causes (one log entry) yield only the new leader.
    pub fn observe(&self, key: &str) -> Leaders {
        let observer = Observer {
            client: self.clone(),
            key: key.to_string(),
            reported: None,
            leader: None,
            events: None,
            pending: VecDeque::new(),
            reconnects: Reconnects::new(),
            ended: false,
        };
        Box::pin(futures::stream::unfold(
            observer,
            |mut observer| async move {
                let item = observer.next().await?;
                Some((item, observer))
            },
        ))
    }
}

impl Observer {
    async fn next(&mut self) -> Option<Result<Option<Leader>, Error>> {
        loop {
            if let Some(leader) = self.pending.pop_front() {
                return Some(Ok(leader));
            }
            if self.ended {
                return None;
            }
            let error = match self.events.as_mut() {
                None => match self.read().await {
                    Ok(()) => continue,
                    Err(error) => error,
                },
                Some(events) => match events.next().await {
                    Some(Ok(message)) => {
                        self.apply(&message.events);
                        continue;
                    }
                    Some(Err(error)) => error,
                    None => Error::Local("the watch ended".into()),
                },
            };
            self.events = None;
            if error.reason() == Some(Reason::Compacted) {
                // The events since the last revision are gone: read the key afresh.
                continue;
            }
            if !error.is_retryable() {
                self.ended = true;
                return Some(Err(error));
            }
            self.reconnects.wait().await;
        }
    }

    /// Reads the key linearizably and watches it from the read's revision.
    async fn read(&mut self) -> Result<(), Error> {
        let response = self
            .client
            .get_resource(pb::GetResourceRequest {
                name: self.key.clone(),
                consistency: pb::Consistency::Linearizable as i32,
            })
            .await?;
        self.reconnects.reset();
        self.leader = response.resource.and_then(|resource| {
            resource
                .leases
                .into_iter()
                .find(|lease| exclusive(lease.mode))
                .map(|lease| Leader {
                    holder: lease.holder,
                    fencing_token: lease.fencing_token,
                    lease_id: lease.lease_id,
                })
        });
        self.report();
        self.events = Some(self.client.watch_resuming(pb::WatchRequest {
            resource: self.key.clone(),
            start_revision: response.read_revision,
            events: LEADERSHIP_EVENTS.iter().map(|e| *e as i32).collect(),
            ..Default::default()
        }));
        Ok(())
    }

    /// Applies events in log order, reporting the leader after each revision.
    fn apply(&mut self, events: &[pb::HistoryEntry]) {
        for (i, event) in events.iter().enumerate() {
            self.leader = after(self.leader.take(), event);
            let revision_ends = events
                .get(i + 1)
                .is_none_or(|next| next.revision != event.revision);
            if revision_ends {
                self.report();
            }
        }
    }

    fn report(&mut self) {
        if self.reported.as_ref() != Some(&self.leader) {
            self.reported = Some(self.leader.clone());
            self.pending.push_back(self.leader.clone());
        }
    }
}

fn exclusive(mode: i32) -> bool {
    matches!(
        pb::LeaseMode::try_from(mode),
        Ok(pb::LeaseMode::Unspecified | pb::LeaseMode::Exclusive)
    )
}

/// The leader after `event`, given the leader before it.
fn after(leader: Option<Leader>, event: &pb::HistoryEntry) -> Option<Leader> {
    if !exclusive(event.mode) {
        return leader;
    }
    let ends_it = leader
        .as_ref()
        .is_some_and(|l| l.lease_id == event.lease_id);
    match pb::EventType::try_from(event.event) {
        Ok(pb::EventType::Acquired | pb::EventType::Admitted) => Some(Leader {
            holder: event.holder.clone(),
            fencing_token: event.fencing_token,
            lease_id: event.lease_id.clone(),
        }),
        Ok(pb::EventType::Transferred) => Some(Leader {
            holder: event.to_holder.clone(),
            fencing_token: event.to_fencing_token,
            lease_id: event.to_lease_id.clone(),
        }),
        Ok(pb::EventType::Released | pb::EventType::Reclaimed) if ends_it => None,
        _ => leader,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: pb::EventType, revision: u64, holder: &str, token: u64) -> pb::HistoryEntry {
        pb::HistoryEntry {
            revision,
            event: kind as i32,
            holder: holder.into(),
            fencing_token: token,
            lease_id: format!("lse_{token}_0"),
            mode: pb::LeaseMode::Exclusive as i32,
            ..Default::default()
        }
    }

    fn leader(holder: &str, token: u64) -> Option<Leader> {
        Some(Leader {
            holder: holder.into(),
            fencing_token: token,
            lease_id: format!("lse_{token}_0"),
        })
    }

    fn observer() -> Observer {
        Observer {
            client: Client::new(["127.0.0.1:1"]).expect("endpoint"),
            key: "k".into(),
            reported: Some(None),
            leader: None,
            events: None,
            pending: VecDeque::new(),
            reconnects: Reconnects::new(),
            ended: false,
        }
    }

    #[tokio::test]
    async fn a_release_and_the_admission_in_its_entry_report_only_the_new_leader() {
        let mut observer = observer();
        observer.apply(&[event(pb::EventType::Acquired, 5, "a", 5)]);
        observer.apply(&[
            event(pb::EventType::Released, 9, "a", 5),
            event(pb::EventType::Admitted, 9, "b", 9),
        ]);
        observer.apply(&[event(pb::EventType::Reclaimed, 12, "b", 9)]);
        assert_eq!(
            Vec::from(observer.pending),
            [leader("a", 5), leader("b", 9), None]
        );
    }

    #[test]
    fn a_transfer_names_the_new_holder_and_a_stranger_release_changes_nothing() {
        let transfer = pb::HistoryEntry {
            to_holder: "b".into(),
            to_fencing_token: 11,
            to_lease_id: "lse_11_0".into(),
            ..event(pb::EventType::Transferred, 11, "a", 5)
        };
        assert_eq!(after(leader("a", 5), &transfer), leader("b", 11));
        let other = event(pb::EventType::Released, 12, "c", 7);
        assert_eq!(after(leader("b", 11), &other), leader("b", 11));
    }
}
