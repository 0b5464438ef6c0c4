//! Any node serves any call (SPEC §2), and answers it alike: every field of every answer a
//! follower gives is the one the leader gives. A follower hands writes and linearizable reads
//! to the leader and passes the leader's answer on, so whatever that hand-over loses shows
//! here (it once lost every lease's `session_id`).
//!
//! The comparison is generated from the proto: each answer is decoded by its descriptor and
//! compared field by field, and the test fails unless it compared every method of
//! `tenure.v1.Leases` and `tenure.v1.Cluster` (less those listed, with why) and saw every field
//! of their answers set in at least one answer (less those listed, with why). A field or a
//! method added later fails here until the scenario shows it.
//!
//! - A write the cluster remembers (SPEC §4.18) goes to the follower first, then the same
//!   request (same `request_id`) to the leader: the retry's answer is the original one, so the
//!   two must be equal to the last field.
//! - A renewal is not remembered: sent to both, it extends twice, and only the fields that
//!   say when (expiry, time left) may differ.
//! - A linearizable read goes to both, until both answered at the same revision.
//! - A watch of everything the scenario did, from revision 0, on both.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use prost::Message;
use prost_reflect::{
    DescriptorPool, DynamicMessage, Kind, MessageDescriptor, ReflectMessage, Value,
};
use tenure_client::{pb, prost_duration};
use tenure_proto::v1::cluster_client::ClusterClient;
use tenure_proto::v1::leases_client::LeasesClient;
use tenure_tests::started;
use tonic::transport::Channel;

/// Methods not compared, and why.
const METHODS_NOT_COMPARED: [(&str, &str); 8] = [
    (
        "tenure.v1.Leases/Serve",
        "the owner's inbox on the node it called (t75 serves through every node)",
    ),
    (
        "tenure.v1.Leases/Forward",
        "answers with the owner's own bytes (t75 forwards through every node)",
    ),
    (
        "tenure.v1.Cluster/GetQuota",
        "answers from the answering node's own state and streams, by contract (SPEC §4.17)",
    ),
    (
        "tenure.v1.Cluster/Status",
        "describes the node that answers",
    ),
    (
        "tenure.v1.Cluster/AddLearner",
        "changes the membership (t90)",
    ),
    (
        "tenure.v1.Cluster/ChangeMembership",
        "changes the membership (t90)",
    ),
    (
        "tenure.v1.Cluster/TransferLeader",
        "moves the leadership this test compares against (t90)",
    ),
    (
        "tenure.v1.Cluster/Snapshot",
        "takes the snapshot of the node that answers",
    ),
];

/// Fields of compared answers never seen set here, and why (`*.name`: that field of any
/// message).
const FIELDS_NOT_SEEN: [(&str, &str); 2] = [
    (
        "*.stale",
        "true only for a stale read, which a node answers from its own state",
    ),
    (
        "tenure.v1.QuotaLine.used",
        "what a principal holds on streams is counted by the answering node (SPEC §4.17): SetQuota is compared for one that holds nothing",
    ),
];

/// Fields that say when, which a renewal sent twice sets twice.
const INSTANT: [&str; 4] = [
    "tenure.v1.Lease.expires_at",
    "tenure.v1.Lease.remaining",
    "tenure.v1.Session.expires_at",
    "tenure.v1.Session.remaining",
];

/// The follower's and the leader's answers, compared field by field.
struct Compare {
    pool: DescriptorPool,
    methods: BTreeSet<String>,
    /// Fields (full names) set in at least one compared answer.
    seen: BTreeSet<String>,
    /// Response types of the compared methods.
    outputs: BTreeSet<String>,
}

impl Compare {
    fn new() -> Self {
        Compare {
            pool: DescriptorPool::decode(tenure_proto::FILE_DESCRIPTOR_SET).expect("descriptors"),
            methods: BTreeSet::new(),
            seen: BTreeSet::new(),
            outputs: BTreeSet::new(),
        }
    }

    /// The answer type of `method` (`tenure.v1.Leases/Acquire`).
    fn output(&self, method: &str) -> MessageDescriptor {
        let (service, name) = method.split_once('/').expect("Service/Method");
        self.pool
            .get_service_by_name(service)
            .unwrap_or_else(|| panic!("no service {service}"))
            .methods()
            .find(|m| m.name() == name)
            .unwrap_or_else(|| panic!("no method {method}"))
            .output()
    }

    fn decode(&self, method: &str, answer: &impl Message) -> DynamicMessage {
        DynamicMessage::decode(self.output(method), answer.encode_to_vec().as_slice())
            .expect("an answer decodes by its descriptor")
    }

    /// `follower` and `leader`, answers of `method`, are equal but for the fields in `instant`.
    #[track_caller]
    fn same<M: Message + std::fmt::Debug>(
        &mut self,
        method: &str,
        follower: &M,
        leader: &M,
        instant: &[&str],
    ) {
        let (typed_f, typed_l) = (follower, leader);
        let (follower, leader) = (self.decode(method, follower), self.decode(method, leader));
        let mut diffs = Vec::new();
        self.walk(method, &follower, &leader, instant, &mut diffs);
        assert!(
            diffs.is_empty(),
            "{method}: the follower's answer differs from the leader's:\n  {}\nfollower: {typed_f:?}\nleader: {typed_l:?}",
            diffs.join("\n  ")
        );
        self.methods.insert(method.to_string());
        self.outputs
            .insert(self.output(method).full_name().to_string());
    }

    fn walk(
        &mut self,
        path: &str,
        follower: &DynamicMessage,
        leader: &DynamicMessage,
        instant: &[&str],
        diffs: &mut Vec<String>,
    ) {
        for field in follower.descriptor().fields() {
            let name = field.full_name().to_string();
            let here = format!("{path}.{}", field.name());
            if follower.has_field(&field) {
                self.seen.insert(name.clone());
            }
            if exempt(instant, &name, &here) {
                continue;
            }
            let (f, l) = (follower.get_field(&field), leader.get_field(&field));
            self.values(&here, &f, &l, instant, diffs);
        }
    }

    fn values(
        &mut self,
        path: &str,
        follower: &Value,
        leader: &Value,
        instant: &[&str],
        diffs: &mut Vec<String>,
    ) {
        match (follower, leader) {
            (Value::Message(f), Value::Message(l))
                if !f.descriptor().full_name().starts_with("google.protobuf.") =>
            {
                self.walk(path, f, l, instant, diffs)
            }
            (Value::List(f), Value::List(l)) if f.len() == l.len() => {
                for (i, (f, l)) in f.iter().zip(l).enumerate() {
                    self.values(&format!("{path}[{i}]"), f, l, instant, diffs);
                }
            }
            (f, l) if f == l => {}
            (f, l) => diffs.push(format!(
                "{path}: follower {}, leader {}",
                shown(f),
                shown(l)
            )),
        }
    }

    /// Every field of the answers compared, as far as they reach.
    fn reachable(&self) -> BTreeSet<String> {
        let mut fields = BTreeSet::new();
        let mut visited = BTreeSet::new();
        let mut todo: Vec<MessageDescriptor> = self
            .outputs
            .iter()
            .map(|name| self.pool.get_message_by_name(name).expect("a message"))
            .collect();
        while let Some(message) = todo.pop() {
            if !visited.insert(message.full_name().to_string()) {
                continue;
            }
            for field in message.fields() {
                fields.insert(field.full_name().to_string());
                if let Kind::Message(inner) = field.kind() {
                    if !field.is_map() && !inner.full_name().starts_with("google.protobuf.") {
                        todo.push(inner);
                    }
                }
            }
        }
        fields
    }

    /// Every method but those of [`METHODS_NOT_COMPARED`] was compared, and every field of
    /// their answers but those of [`FIELDS_NOT_SEEN`] was seen set.
    fn covered(&self) {
        let excused: BTreeSet<&str> = METHODS_NOT_COMPARED.iter().map(|(m, _)| *m).collect();
        let mut missing = Vec::new();
        for service in ["tenure.v1.Leases", "tenure.v1.Cluster"] {
            let service = self.pool.get_service_by_name(service).expect("the service");
            for method in service.methods() {
                let name = format!("{}/{}", service.full_name(), method.name());
                if !excused.contains(name.as_str()) && !self.methods.contains(&name) {
                    missing.push(name);
                }
            }
        }
        assert!(
            missing.is_empty(),
            "methods never compared (compare them, or say in METHODS_NOT_COMPARED why not): {missing:?}"
        );
        let excused = |field: &str| {
            FIELDS_NOT_SEEN
                .iter()
                .any(|(f, _)| match f.strip_prefix('*') {
                    Some(suffix) => field.ends_with(suffix),
                    None => *f == field,
                })
        };
        let unseen: Vec<String> = self
            .reachable()
            .into_iter()
            .filter(|f| !self.seen.contains(f) && !excused(f))
            .collect();
        assert!(
            unseen.is_empty(),
            "fields never set in a compared answer (make the scenario show them, or say in FIELDS_NOT_SEEN why not): {unseen:?}"
        );
    }
}

/// A value in a few words (a message by its fields' numbers and values).
fn shown(value: &Value) -> String {
    match value {
        Value::Message(m) => format!(
            "{{{}}}",
            m.fields()
                .map(|(field, value)| format!("{}: {}", field.name(), shown(value)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::List(items) => format!(
            "[{}]",
            items.iter().map(shown).collect::<Vec<_>>().join(", ")
        ),
        other => format!("{other:?}"),
    }
}

/// What a retry reads again as it is when the retry arrives (SPEC §4.18): the holders of a
/// refused acquire (whose time left has run on since, and whose advisory wall-clock expiry is
/// estimated again), and when a closed resource opens (estimated again). `FIELD@list` is the
/// field only within that list.
const READ_AGAIN: [&str; 4] = [
    "tenure.v1.Lease.remaining@holders",
    "tenure.v1.Lease.expires_at@holders",
    "tenure.v1.AcquireResponse.closed_until",
    "tenure.v1.ClaimOutcome.closed_until",
];

/// Whether the field `name` at `path` is one of `exempt`.
fn exempt(exempt: &[&str], name: &str, path: &str) -> bool {
    exempt.iter().any(|e| match e.split_once('@') {
        Some((field, list)) => field == name && path.contains(&format!(".{list}[")),
        None => *e == name,
    })
}

/// Sends `$request` to the follower, then to the leader: (the follower's answer, the
/// leader's).
macro_rules! both {
    ($method:literal, ($f:expr, $l:expr), $call:ident, $request:expr) => {{
        let request = $request;
        let mut answers = Vec::with_capacity(2);
        for (mut client, node) in [($f.clone(), "follower"), ($l.clone(), "leader")] {
            let answer = client
                .$call(request.clone())
                .await
                .unwrap_or_else(|e| panic!("{} on the {node}: {e}", $method));
            answers.push(answer.into_inner());
        }
        let leader = answers.pop().expect("the leader's answer");
        (answers.pop().expect("the follower's answer"), leader)
    }};
}

/// Sends a remembered write (it must carry a `request_id`) to the follower, then to the
/// leader, where it is a retry, and compares the answers but for `$exempt` (by default what a
/// retry reads again); the follower's answer.
macro_rules! write {
    ($cmp:expr, $method:literal, ($f:expr, $l:expr), $call:ident, $request:expr) => {
        write!($cmp, $method, ($f, $l), $call, $request, &READ_AGAIN)
    };
    ($cmp:expr, $method:literal, ($f:expr, $l:expr), $call:ident, $request:expr, $exempt:expr) => {{
        let (follower, leader) = both!($method, ($f, $l), $call, $request);
        $cmp.same($method, &follower, &leader, $exempt);
        follower
    }};
}

/// Sends a write the cluster does not remember (a renewal) to both, and compares the answers
/// but for when they say it ends; the follower's answer.
macro_rules! renew {
    ($cmp:expr, $method:literal, ($f:expr, $l:expr), $call:ident, $request:expr) => {{
        let (follower, leader) = both!($method, ($f, $l), $call, $request);
        $cmp.same($method, &follower, &leader, &INSTANT);
        follower
    }};
}

/// Sends a linearizable read to both until both answer at the same revision, and compares
/// the answers; the follower's answer.
macro_rules! read {
    ($cmp:expr, $method:literal, ($f:expr, $l:expr), $call:ident, $request:expr) => {{
        let request = $request;
        let mut tries = 0;
        loop {
            let (follower, leader) = both!($method, ($f, $l), $call, request.clone());
            // The leader's own entries (ticks) may come between the two reads.
            tries += 1;
            if follower.read_revision != leader.read_revision && tries < 100 {
                continue;
            }
            $cmp.same($method, &follower, &leader, &[]);
            break follower;
        }
    }};
}

fn request_id(what: &str) -> String {
    format!("t25-{what}")
}

fn at(from_now: Duration) -> prost_types::Timestamp {
    prost_types::Timestamp::from(SystemTime::now() + from_now)
}

fn metadata(pairs: &[(&str, &str)]) -> std::collections::HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Every policy field set: shared, with a pool and a holder cap, bookable, transferable.
fn pool_policy() -> pb::Policy {
    pb::Policy {
        default_ttl: Some(prost_duration(Duration::from_secs(30))),
        max_ttl: Some(prost_duration(Duration::from_secs(3600))),
        max_lifetime: Some(prost_duration(Duration::from_secs(7200))),
        renewal_grace: Some(prost_duration(Duration::from_secs(5))),
        transferable: true,
        shared_modes: vec![pb::LeaseMode::Read as i32, pb::LeaseMode::Write as i32],
        total_units: 10,
        lock_delay: Some(prost_duration(Duration::from_secs(1))),
        max_waiters: 100,
        max_metadata_bytes: 4096,
        kind: "gpu".into(),
        display_name: "GPU pool".into(),
        fsm_requirements: vec![pb::FsmRequirement {
            machine: "deploy".into(),
            transition: "promote".into(),
        }],
        bookable: true,
        max_holders: 5,
    }
}

fn acquire(resource: &str, holder: &str, ttl: Duration, id: &str) -> pb::AcquireRequest {
    pb::AcquireRequest {
        resource: resource.into(),
        holder: holder.into(),
        ttl: Some(prost_duration(ttl)),
        request_id: request_id(id),
        ..Default::default()
    }
}

/// A WAIT acquire through its own client, that answers when its wait ends.
fn wait_in_background(
    mut client: LeasesClient<Channel>,
    request: pb::AcquireRequest,
) -> tokio::task::JoinHandle<pb::AcquireResponse> {
    tokio::spawn(async move {
        client
            .acquire(request)
            .await
            .expect("a waiting acquire")
            .into_inner()
    })
}

/// Reads `events` until one of `kind` on `resource`, and returns everything read.
async fn events_until(
    stream: &mut tonic::Streaming<pb::WatchResponse>,
    kind: pb::EventType,
    resource: &str,
    cmp: &mut Compare,
) -> Vec<pb::HistoryEntry> {
    let mut events = Vec::new();
    loop {
        let message = stream
            .message()
            .await
            .expect("a watch message")
            .expect("the watch stays open");
        // Messages may group revisions differently on each node: their events are compared.
        cmp.same(
            "tenure.v1.Leases/Watch",
            &message,
            &pb::WatchResponse {
                events: message.events.clone(),
                revision: message.revision,
            },
            &[],
        );
        let done = message
            .events
            .iter()
            .any(|e| e.event == kind as i32 && e.resource == resource);
        events.extend(message.events);
        if done {
            return events;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_from_a_follower_is_the_leaders() {
    let (cluster, leader) = started(3).await;
    let follower = cluster.follower_of(leader);
    let channel = |id: u64| {
        Channel::from_shared(format!("http://{}", cluster.addrs[&id]))
            .expect("an address")
            .connect_lazy()
    };
    let (f, l) = (
        LeasesClient::new(channel(follower)),
        LeasesClient::new(channel(leader)),
    );
    let (cf, cl) = (
        ClusterClient::new(channel(follower)),
        ClusterClient::new(channel(leader)),
    );
    let mut cmp = Compare::new();
    let mut watch_f = f
        .clone()
        .watch(pb::WatchRequest {
            prefix: "t25/".into(),
            ..Default::default()
        })
        .await
        .expect("watch the follower")
        .into_inner();

    // Registered resources: every policy field set, and one that closes after a reclaim.
    write!(
        cmp,
        "tenure.v1.Leases/CreateResource",
        (f, l),
        create_resource,
        pb::CreateResourceRequest {
            name: "t25/pool".into(),
            policy: Some(pool_policy()),
            request_id: request_id("create-pool"),
            ..Default::default()
        }
    );
    write!(
        cmp,
        "tenure.v1.Leases/CreateResource",
        (f, l),
        create_resource,
        pb::CreateResourceRequest {
            name: "t25/delay".into(),
            policy: Some(pb::Policy {
                default_ttl: Some(prost_duration(Duration::from_secs(1))),
                renewal_grace: Some(prost_duration(Duration::ZERO)),
                lock_delay: Some(prost_duration(Duration::from_secs(600))),
                ..Default::default()
            }),
            request_id: request_id("create-delay"),
            ..Default::default()
        }
    );

    // Two sessions, the first with a lease and a wait on it.
    let session = write!(
        cmp,
        "tenure.v1.Leases/CreateSession",
        (f, l),
        create_session,
        pb::CreateSessionRequest {
            holder: "s1".into(),
            ttl: Some(prost_duration(Duration::from_secs(120))),
            metadata: metadata(&[("zone", "eu")]),
            request_id: request_id("session-1"),
        }
    )
    .session
    .expect("a session");
    write!(
        cmp,
        "tenure.v1.Leases/CreateSession",
        (f, l),
        create_session,
        pb::CreateSessionRequest {
            holder: "s2".into(),
            ttl: Some(prost_duration(Duration::from_secs(120))),
            metadata: Default::default(),
            request_id: request_id("session-2"),
        }
    );
    let on_session = write!(
        cmp,
        "tenure.v1.Leases/Acquire",
        (f, l),
        acquire,
        pb::AcquireRequest {
            resource: "t25/x".into(),
            holder: "s1".into(),
            session_id: session.session_id.clone(),
            request_id: request_id("on-session"),
            ..Default::default()
        }
    );
    let on_session = on_session.lease.expect("granted on the session");
    assert_eq!(
        on_session.session_id, session.session_id,
        "a lease on a session names it"
    );
    // Refused: the holder shown is the session's lease.
    let refused = write!(
        cmp,
        "tenure.v1.Leases/Acquire",
        (f, l),
        acquire,
        acquire("t25/x", "b", Duration::from_secs(10), "refused-x")
    );
    assert!(!refused.granted);

    // A shared lease with metadata and units, and a booking ahead that refuses a long one.
    let shared = write!(
        cmp,
        "tenure.v1.Leases/Acquire",
        (f, l),
        acquire,
        pb::AcquireRequest {
            mode: pb::LeaseMode::Read as i32,
            units: 3,
            metadata: metadata(&[("job", "train")]),
            idempotency_key: "idem-a".into(),
            ..acquire("t25/pool", "a", Duration::from_secs(20), "shared-a")
        }
    )
    .lease
    .expect("granted");
    let booked = write!(
        cmp,
        "tenure.v1.Leases/Book",
        (f, l),
        book,
        pb::BookRequest {
            resource: "t25/pool".into(),
            holder: "e".into(),
            start: Some(at(Duration::from_secs(1800))),
            duration: Some(prost_duration(Duration::from_secs(600))),
            request_id: request_id("book-e"),
        }
    )
    .booking
    .expect("booked");
    let into_booking = write!(
        cmp,
        "tenure.v1.Leases/Acquire",
        (f, l),
        acquire,
        pb::AcquireRequest {
            mode: pb::LeaseMode::Read as i32,
            units: 1,
            ..acquire("t25/pool", "f", Duration::from_secs(2700), "into-booking")
        }
    );
    assert!(into_booking.booked_from.is_some(), "{into_booking:?}");

    // A reclaim closes t25/delay for its lock delay.
    write!(
        cmp,
        "tenure.v1.Leases/Acquire",
        (f, l),
        acquire,
        acquire("t25/delay", "g", Duration::from_secs(1), "delay-g")
    );
    events_until(
        &mut watch_f,
        pb::EventType::Reclaimed,
        "t25/delay",
        &mut cmp,
    )
    .await;
    let closed = write!(
        cmp,
        "tenure.v1.Leases/Acquire",
        (f, l),
        acquire,
        acquire("t25/delay", "h", Duration::from_secs(10), "delay-h")
    );
    assert!(closed.closed_until.is_some(), "{closed:?}");

    // Several at once: granted, and refused claim by claim (booked, closed, held).
    write!(
        cmp,
        "tenure.v1.Leases/AcquireMany",
        (f, l),
        acquire_many,
        pb::AcquireManyRequest {
            holder: "mm".into(),
            claims: ["t25/m1", "t25/m2"]
                .map(|r| pb::ResourceClaim {
                    resource: r.into(),
                    ..Default::default()
                })
                .to_vec(),
            ttl: Some(prost_duration(Duration::from_secs(60))),
            metadata: metadata(&[("batch", "7")]),
            request_id: request_id("many-granted"),
            ..Default::default()
        }
    );
    let many_refused = write!(
        cmp,
        "tenure.v1.Leases/AcquireMany",
        (f, l),
        acquire_many,
        pb::AcquireManyRequest {
            holder: "mn".into(),
            claims: vec![
                pb::ResourceClaim {
                    resource: "t25/pool".into(),
                    mode: pb::LeaseMode::Read as i32,
                    units: 1,
                },
                pb::ResourceClaim {
                    resource: "t25/delay".into(),
                    ..Default::default()
                },
                pb::ResourceClaim {
                    resource: "t25/m1".into(),
                    ..Default::default()
                },
            ],
            ttl: Some(prost_duration(Duration::from_secs(2700))),
            request_id: request_id("many-refused"),
            ..Default::default()
        }
    );
    assert!(!many_refused.granted);

    // A wait that times out: its answer has its place in the queue.
    let timed_out = write!(
        cmp,
        "tenure.v1.Leases/Acquire",
        (f, l),
        acquire,
        pb::AcquireRequest {
            on_conflict: pb::OnConflict::Wait as i32,
            wait_timeout: Some(prost_duration(Duration::from_secs(1))),
            ..acquire("t25/x", "w1", Duration::from_secs(10), "wait-w1")
        }
    );
    assert_eq!(timed_out.queue_position, 1, "{timed_out:?}");

    // Waiters that stay: one for more units than are free, one on the first session.
    let units_wait = wait_in_background(
        l.clone(),
        pb::AcquireRequest {
            mode: pb::LeaseMode::Read as i32,
            units: 8,
            on_conflict: pb::OnConflict::Wait as i32,
            wait_timeout: Some(prost_duration(Duration::from_secs(120))),
            ..acquire("t25/pool", "w2", Duration::from_secs(10), "wait-w2")
        },
    );
    let queued = events_until(&mut watch_f, pb::EventType::Queued, "t25/pool", &mut cmp).await;
    let queued_revision = queued.last().expect("the queued event").revision;
    write!(
        cmp,
        "tenure.v1.Leases/Acquire",
        (f, l),
        acquire,
        acquire("t25/y", "b2", Duration::from_secs(120), "hold-y")
    );
    let session_wait = wait_in_background(
        l.clone(),
        pb::AcquireRequest {
            resource: "t25/y".into(),
            holder: "s1".into(),
            session_id: session.session_id.clone(),
            on_conflict: pb::OnConflict::Wait as i32,
            wait_timeout: Some(prost_duration(Duration::from_secs(120))),
            request_id: request_id("wait-s1"),
            ..Default::default()
        },
    );
    events_until(&mut watch_f, pb::EventType::Queued, "t25/y", &mut cmp).await;

    // A multi-wait that times out.
    write!(
        cmp,
        "tenure.v1.Leases/AcquireMany",
        (f, l),
        acquire_many,
        pb::AcquireManyRequest {
            holder: "mw".into(),
            claims: vec![pb::ResourceClaim {
                resource: "t25/m1".into(),
                ..Default::default()
            }],
            ttl: Some(prost_duration(Duration::from_secs(10))),
            on_conflict: pb::OnConflict::Wait as i32,
            wait_timeout: Some(prost_duration(Duration::from_secs(1))),
            request_id: request_id("many-wait"),
            ..Default::default()
        }
    );

    // Reads of all of it.
    read!(
        cmp,
        "tenure.v1.Leases/GetResource",
        (f, l),
        get_resource,
        pb::GetResourceRequest {
            name: "t25/pool".into(),
            consistency: 0,
        }
    );
    let x = read!(
        cmp,
        "tenure.v1.Leases/GetResource",
        (f, l),
        get_resource,
        pb::GetResourceRequest {
            name: "t25/x".into(),
            consistency: 0,
        }
    );
    assert_eq!(
        x.resource.expect("t25/x").leases[0].session_id,
        session.session_id
    );
    read!(
        cmp,
        "tenure.v1.Leases/ListResources",
        (f, l),
        list_resources,
        pb::ListResourcesRequest {
            prefix: "t25/".into(),
            page_size: 2,
            ..Default::default()
        }
    );
    read!(
        cmp,
        "tenure.v1.Leases/ListLeases",
        (f, l),
        list_leases,
        pb::ListLeasesRequest {
            principal: "anonymous".into(),
            page_size: 3,
            ..Default::default()
        }
    );
    read!(
        cmp,
        "tenure.v1.Leases/ListLeases",
        (f, l),
        list_leases,
        pb::ListLeasesRequest {
            holder: "s1".into(),
            ..Default::default()
        }
    );
    read!(
        cmp,
        "tenure.v1.Leases/Validate",
        (f, l),
        validate,
        pb::ValidateRequest {
            resource: "t25/pool".into(),
            lease_id: shared.lease_id.clone(),
            fencing_token: shared.fencing_token,
            fsm_machine: "deploy".into(),
            fsm_transition: "promote".into(),
            consistency: 0,
        }
    );
    read!(
        cmp,
        "tenure.v1.Leases/Validate",
        (f, l),
        validate,
        pb::ValidateRequest {
            resource: "t25/x".into(),
            lease_id: on_session.lease_id.clone(),
            fencing_token: on_session.fencing_token + 1,
            ..Default::default()
        }
    );
    read!(
        cmp,
        "tenure.v1.Leases/GetSession",
        (f, l),
        get_session,
        pb::GetSessionRequest {
            session_id: session.session_id.clone(),
            consistency: 0,
        }
    );
    read!(
        cmp,
        "tenure.v1.Leases/ListSessions",
        (f, l),
        list_sessions,
        pb::ListSessionsRequest {
            page_size: 1,
            ..Default::default()
        }
    );

    // Renewals, by call and on the KeepAlive stream (one refused).
    let renewed = renew!(
        cmp,
        "tenure.v1.Leases/Renew",
        (f, l),
        renew,
        pb::RenewRequest {
            resource: "t25/pool".into(),
            lease_id: shared.lease_id.clone(),
            holder: "a".into(),
            fencing_token: shared.fencing_token,
            ttl: Some(prost_duration(Duration::from_secs(25))),
            request_id: request_id("renew-a"),
            ..Default::default()
        }
    );
    assert_eq!(renewed.lease.expect("renewed").lease_id, shared.lease_id);
    renew!(
        cmp,
        "tenure.v1.Leases/RenewSession",
        (f, l),
        renew_session,
        pb::RenewSessionRequest {
            session_id: session.session_id.clone(),
            request_id: request_id("renew-s1"),
        }
    );
    let keep_alive = |request: pb::KeepAliveRequest| {
        let (f, l) = (f.clone(), l.clone());
        async move {
            let mut answers = Vec::new();
            for mut client in [f, l] {
                let mut stream = client
                    .keep_alive(tokio_stream::iter([request.clone()]))
                    .await
                    .expect("a KeepAlive stream")
                    .into_inner();
                answers.push(
                    stream
                        .message()
                        .await
                        .expect("an answer")
                        .expect("the stream answers"),
                );
            }
            answers
        }
    };
    let renewal = pb::RenewRequest {
        resource: "t25/pool".into(),
        lease_id: shared.lease_id.clone(),
        holder: "a".into(),
        fencing_token: shared.fencing_token,
        ttl: None,
        request_id: String::new(),
        ..Default::default()
    };
    for request in [
        pb::KeepAliveRequest {
            seq: 1,
            renew: Some(renewal.clone()),
            session_id: String::new(),
        },
        pb::KeepAliveRequest {
            seq: 2,
            renew: None,
            session_id: session.session_id.clone(),
        },
        pb::KeepAliveRequest {
            seq: 3,
            renew: Some(pb::RenewRequest {
                fencing_token: shared.fencing_token + 1,
                ..renewal.clone()
            }),
            session_id: String::new(),
        },
    ] {
        let answers = keep_alive(request).await;
        cmp.same(
            "tenure.v1.Leases/KeepAlive",
            &answers[0],
            &answers[1],
            &INSTANT,
        );
    }

    // The waits end: one cancelled by name, one with its session's close.
    let cancelled = write!(
        cmp,
        "tenure.v1.Leases/CancelWait",
        (f, l),
        cancel_wait,
        pb::CancelWaitRequest {
            resource: "t25/pool".into(),
            holder: "w2".into(),
            request_id: request_id("cancel-w2"),
            queued_revision,
        }
    );
    assert!(cancelled.cancelled);
    assert!(!units_wait.await.expect("the waiter").granted);

    // A transfer, history, a release, a cancelled booking, quotas, and the session's close.
    let transferred = write!(
        cmp,
        "tenure.v1.Leases/Transfer",
        (f, l),
        transfer,
        pb::TransferRequest {
            resource: "t25/pool".into(),
            lease_id: shared.lease_id.clone(),
            holder: "a".into(),
            fencing_token: shared.fencing_token,
            to_holder: "a2".into(),
            to_principal: String::new(),
            request_id: request_id("transfer-a"),
        }
    )
    .lease
    .expect("transferred");
    for order in [pb::Order::Asc, pb::Order::Desc] {
        for resource in ["t25/pool", "t25/x", "t25/m1", "t25/m2"] {
            read!(
                cmp,
                "tenure.v1.Leases/History",
                (f, l),
                history,
                pb::HistoryRequest {
                    resource: resource.into(),
                    page_size: 4,
                    order: order as i32,
                    ..Default::default()
                }
            );
        }
    }
    // A waiter the release admits in its own entry: two events of one resource (seq 0, 1).
    let admitted = wait_in_background(
        l.clone(),
        pb::AcquireRequest {
            mode: pb::LeaseMode::Read as i32,
            units: 8,
            on_conflict: pb::OnConflict::Wait as i32,
            wait_timeout: Some(prost_duration(Duration::from_secs(120))),
            ..acquire("t25/pool", "w3", Duration::from_secs(60), "wait-w3")
        },
    );
    events_until(&mut watch_f, pb::EventType::Queued, "t25/pool", &mut cmp).await;
    write!(
        cmp,
        "tenure.v1.Leases/Release",
        (f, l),
        release,
        pb::ReleaseRequest {
            resource: "t25/pool".into(),
            lease_id: transferred.lease_id.clone(),
            holder: "a2".into(),
            fencing_token: transferred.fencing_token,
            request_id: request_id("release-a2"),
        },
        // An ended lease is remembered without its metadata (SPEC §4.16): a retried release
        // shows none.
        &[&READ_AGAIN[..], &["tenure.v1.Lease.metadata"]].concat()
    );
    assert!(admitted.await.expect("the waiter").granted);
    write!(
        cmp,
        "tenure.v1.Leases/CancelBooking",
        (f, l),
        cancel_booking,
        pb::CancelBookingRequest {
            resource: "t25/pool".into(),
            holder: "e".into(),
            start: booked.start,
            request_id: request_id("cancel-e"),
        }
    );
    write!(
        cmp,
        "tenure.v1.Cluster/SetQuota",
        (cf, cl),
        set_quota,
        pb::SetQuotaRequest {
            principal: "bob".into(),
            changes: vec![pb::QuotaChange {
                quota: "leases".into(),
                limit: 5,
                reset: false,
            }],
            request_id: request_id("quota-bob"),
        }
    );
    let closed_session = write!(
        cmp,
        "tenure.v1.Leases/CloseSession",
        (f, l),
        close_session,
        pb::CloseSessionRequest {
            session_id: session.session_id.clone(),
            request_id: request_id("close-s1"),
        }
    )
    .session
    .expect("the closed session");
    assert!(closed_session
        .leases
        .iter()
        .all(|lease| lease.session_id == session.session_id));
    assert!(!session_wait.await.expect("the session's waiter").granted);

    // What every node shows of all of it, from the start.
    let mut watch_l = l
        .clone()
        .watch(pb::WatchRequest {
            prefix: "t25/".into(),
            ..Default::default()
        })
        .await
        .expect("watch the leader")
        .into_inner();
    let mut watch_f = f
        .clone()
        .watch(pb::WatchRequest {
            prefix: "t25/".into(),
            ..Default::default()
        })
        .await
        .expect("watch the follower")
        .into_inner();
    let on_follower = events_until(&mut watch_f, pb::EventType::Released, "t25/x", &mut cmp).await;
    let on_leader = events_until(&mut watch_l, pb::EventType::Released, "t25/x", &mut cmp).await;
    let as_dynamic = |events: Vec<pb::HistoryEntry>| pb::WatchResponse {
        events,
        revision: 0,
    };
    cmp.same(
        "tenure.v1.Leases/Watch",
        &as_dynamic(on_follower),
        &as_dynamic(on_leader),
        &[],
    );

    cmp.covered();
}
