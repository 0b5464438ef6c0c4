//! What the cluster itself recorded (SPEC §4.11, §4.12): the lifecycle events of every resource,
//! as the run read them after the clients stopped, and every `Watch` session the watchers held
//! open, with each event and progress revision it was sent.

use serde::{Deserialize, Serialize};

use super::Nanos;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The kind of a history event: the proto's own enum.
pub use tenure_proto::v1::EventType as EventKind;

/// `admitted`, `wait_timed_out`: an event kind as history files and messages name it.
pub fn kind_name(kind: EventKind) -> String {
    kind.as_str_name()
        .trim_start_matches("EVENT_TYPE_")
        .to_ascii_lowercase()
}

/// [`EventKind`] in history files, by [`kind_name`].
mod kind_by_name {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::{kind_name, EventKind};

    pub fn serialize<S: Serializer>(kind: &EventKind, out: S) -> Result<S::Ok, S::Error> {
        out.serialize_str(&kind_name(*kind))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(input: D) -> Result<EventKind, D::Error> {
        let name = String::deserialize(input)?;
        Ok(
            EventKind::from_str_name(&format!("EVENT_TYPE_{}", name.to_ascii_uppercase()))
                .unwrap_or(EventKind::Unspecified),
        )
    }
}

/// One event of a resource's history, as far as the checkers compare them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The index of the entry that caused it.
    pub revision: u64,
    /// Its place among the resource's events of that revision.
    pub seq: u32,
    pub resource: String,
    #[serde(with = "kind_by_name")]
    pub kind: EventKind,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub holder: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub token: u64,
    /// A transfer's new holder and its token.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub to_holder: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub to_token: u64,
    /// The session of the lease or wait the event is about (SPEC §4.24), if any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub session: String,
}

/// Where an event sorts in a watch: (revision, resource, seq).
pub type EventKey<'a> = (u64, &'a str, u32);

impl Event {
    pub fn key(&self) -> EventKey<'_> {
        (self.revision, self.resource.as_str(), self.seq)
    }

    /// `w0@412.1 admitted c3 token 412`
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{}@{}.{} {}",
            self.resource,
            self.revision,
            self.seq,
            kind_name(self.kind)
        );
        if !self.holder.is_empty() {
            s.push_str(&format!(" {}", self.holder));
        }
        if self.token > 0 {
            s.push_str(&format!(" token {}", self.token));
        }
        if !self.to_holder.is_empty() {
            s.push_str(&format!(" → {} token {}", self.to_holder, self.to_token));
        }
        s
    }
}

/// What a watch covers.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchScope {
    Resource(String),
    /// Every resource whose name starts with this (empty: all).
    Prefix(String),
}

impl WatchScope {
    pub fn covers(&self, resource: &str) -> bool {
        match self {
            WatchScope::Resource(name) => name == resource,
            WatchScope::Prefix(prefix) => resource.starts_with(prefix.as_str()),
        }
    }

    /// `w0`, `prefix "w"`.
    pub fn describe(&self) -> String {
        match self {
            WatchScope::Resource(name) => name.clone(),
            WatchScope::Prefix(prefix) => format!("prefix {prefix:?}"),
        }
    }
}

/// One `WatchResponse` (consecutive progress messages without events are kept as one, with
/// the highest revision: the strongest claim made at that point of the stream).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchMessage {
    pub at_ns: Nanos,
    /// Every event up to this revision has been sent.
    pub revision: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<Event>,
}

/// Why a watch session ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "end", rename_all = "snake_case")]
pub enum SessionEnd {
    /// The run was over.
    Stopped,
    /// The watcher moved to another node on its own.
    Moved,
    /// Nothing arrived for too long (a paused or cut-off node): the watcher gave up on it.
    Idle,
    /// The node answered `compacted`: events before `oldest_revision` are no longer retained.
    Compacted { oldest_revision: u64 },
    /// The stream failed, or could not be opened.
    Error { error: String },
    /// The node ended the stream.
    Closed,
}

/// One `Watch` stream of one watcher, from `start_revision` on one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchSession {
    pub watcher: u64,
    pub scope: WatchScope,
    /// 1-based.
    pub node: u64,
    pub start_revision: u64,
    pub opened_ns: Nanos,
    pub closed_ns: Nanos,
    pub messages: Vec<WatchMessage>,
    pub end: SessionEnd,
}

impl WatchSession {
    /// Adds a message, folding a progress message into a preceding one.
    pub fn push(&mut self, message: WatchMessage) {
        if message.events.is_empty() {
            if let Some(last) = self.messages.last_mut().filter(|m| m.events.is_empty()) {
                last.revision = last.revision.max(message.revision);
                last.at_ns = message.at_ns;
                return;
            }
        }
        self.messages.push(message);
    }

    /// The highest revision the session was told it had every event up to.
    pub fn covered(&self) -> u64 {
        self.messages
            .iter()
            .map(|m| m.revision)
            .max()
            .unwrap_or(0)
            .max(self.start_revision)
    }

    pub fn events(&self) -> impl Iterator<Item = &Event> {
        self.messages.iter().flat_map(|m| m.events.iter())
    }
}
