//! A row of the bad-input tables: what is wrong, the request, and the code and SPEC §3 reason
//! it must get. The requests a row starts from ([`Base`]) are right in every way, so a row
//! changes one field only.

use tenure_client::pb;
use tonic::transport::Channel;
use tonic::{Code, Status};

use tenure_proto::v1::leases_client::LeasesClient;

/// Acquired before the barrage; must come out of it untouched.
pub const HELD: &str = "t50/held";
pub const HOLDER: &str = "t50-holder";
/// The resource the bad acquires aim at.
pub const BAD: &str = "t50/bad";
/// Registered before the barrage: shared READ leases draw from a pool of [`POOL_UNITS`].
pub const POOL: &str = "t50/pool";
pub const POOL_UNITS: u64 = 4;
pub const MIB: usize = 1024 * 1024;
pub const DAY_SECONDS: i64 = 24 * 60 * 60;

/// The request of a row, one variant per `Leases` method, and how to send it.
macro_rules! calls {
    ($($variant:ident($request:ty) => $method:ident,)*) => {
        #[derive(Clone, Debug)]
        pub enum Call {
            $($variant($request),)*
        }

        $(impl From<$request> for Call {
            fn from(request: $request) -> Call {
                Call::$variant(request)
            }
        })*

        impl Call {
            /// Sends it through a raw generated client; the reply is dropped. (A watch's
            /// arguments are checked before its stream opens.)
            pub async fn send(self, client: &mut LeasesClient<Channel>) -> Result<(), Status> {
                match self {
                    $(Call::$variant(request) => client.$method(request).await.map(drop),)*
                }
            }
        }
    };
}

calls! {
    GetResource(pb::GetResourceRequest) => get_resource,
    Acquire(pb::AcquireRequest) => acquire,
    Renew(pb::RenewRequest) => renew,
    Release(pb::ReleaseRequest) => release,
    Validate(pb::ValidateRequest) => validate,
    CreateResource(pb::CreateResourceRequest) => create_resource,
    ListResources(pb::ListResourcesRequest) => list_resources,
    Transfer(pb::TransferRequest) => transfer,
    ListLeases(pb::ListLeasesRequest) => list_leases,
    History(pb::HistoryRequest) => history,
    CancelWait(pb::CancelWaitRequest) => cancel_wait,
    Book(pb::BookRequest) => book,
    CancelBooking(pb::CancelBookingRequest) => cancel_booking,
    Watch(pb::WatchRequest) => watch,
    CreateSession(pb::CreateSessionRequest) => create_session,
    AcquireMany(pb::AcquireManyRequest) => acquire_many,
    RenewSession(pb::RenewSessionRequest) => renew_session,
    CloseSession(pb::CloseSessionRequest) => close_session,
    GetSession(pb::GetSessionRequest) => get_session,
    ListSessions(pb::ListSessionsRequest) => list_sessions,
}

/// One bad request and the answer it must get.
pub struct Row {
    pub what: String,
    pub call: Call,
    pub code: Code,
    pub reason: &'static str,
    /// The field the refusal's message must name (SPEC §3.1), where the row checks it.
    pub field: Option<&'static str>,
}

impl Row {
    /// `request`, refused as INVALID_ARGUMENT / `invalid_argument` (most rows are).
    pub fn invalid(what: impl Into<String>, request: impl Into<Call>) -> Row {
        Row {
            what: what.into(),
            call: request.into(),
            code: Code::InvalidArgument,
            reason: "invalid_argument",
            field: None,
        }
    }

    /// The same row, whose refusal must name `field` in its message.
    pub fn naming(self, field: &'static str) -> Row {
        Row {
            field: Some(field),
            ..self
        }
    }

    /// The same row, refused with `code` and `reason` instead.
    pub fn gets(self, code: Code, reason: &'static str) -> Row {
        Row {
            code,
            reason,
            ..self
        }
    }
}

/// Requests that are right in every way: an acquire of [`BAD`], and calls on the held lease
/// (renew and release aim at it, so a check that let one through would change it).
pub struct Base<'a> {
    pub held: &'a pb::Lease,
}

impl Base<'_> {
    pub fn acquire(&self) -> pb::AcquireRequest {
        acquire(BAD, HOLDER)
    }

    pub fn renew(&self) -> pb::RenewRequest {
        pb::RenewRequest {
            resource: HELD.into(),
            lease_id: self.held.lease_id.clone(),
            holder: HOLDER.into(),
            fencing_token: self.held.fencing_token,
            ttl: ttl(600, 0),
            request_id: String::new(),
            ..Default::default()
        }
    }

    pub fn release(&self) -> pb::ReleaseRequest {
        pb::ReleaseRequest {
            resource: HELD.into(),
            lease_id: self.held.lease_id.clone(),
            holder: HOLDER.into(),
            fencing_token: self.held.fencing_token,
            request_id: String::new(),
        }
    }

    pub fn validate(&self) -> pb::ValidateRequest {
        pb::ValidateRequest {
            resource: HELD.into(),
            lease_id: self.held.lease_id.clone(),
            fencing_token: self.held.fencing_token,
            ..Default::default()
        }
    }

    pub fn get(&self) -> pb::GetResourceRequest {
        pb::GetResourceRequest {
            name: HELD.into(),
            consistency: 0,
        }
    }

    pub fn transfer(&self) -> pb::TransferRequest {
        pb::TransferRequest {
            resource: HELD.into(),
            lease_id: self.held.lease_id.clone(),
            holder: HOLDER.into(),
            fencing_token: self.held.fencing_token,
            to_holder: "t50-next".into(),
            to_principal: String::new(),
            request_id: String::new(),
        }
    }
}

pub fn ttl(seconds: i64, nanos: i32) -> Option<prost_types::Duration> {
    Some(prost_types::Duration { seconds, nanos })
}

pub fn acquire(resource: &str, holder: &str) -> pb::AcquireRequest {
    pb::AcquireRequest {
        resource: resource.into(),
        holder: holder.into(),
        ttl: ttl(600, 0),
        ..Default::default()
    }
}

pub fn long(bytes: usize) -> String {
    "a".repeat(bytes)
}

/// Names outside 1-128 bytes of `[A-Za-z0-9_.:/-]`.
pub fn bad_names() -> Vec<(&'static str, String)> {
    vec![
        ("empty", String::new()),
        ("129 bytes", long(129)),
        ("a space", "has space".into()),
        ("unicode", "r\u{e9}sum\u{e9}".into()),
        (
            "non-Latin unicode",
            "\u{440}\u{435}\u{441}\u{443}\u{440}\u{441}".into(),
        ),
        ("a control character", "a\nb".into()),
        ("a NUL", "a\0b".into()),
    ]
}

/// [`bad_names`] but the empty one (where empty means "none given").
pub fn bad_nonempty_names() -> Vec<(&'static str, String)> {
    bad_names()
        .into_iter()
        .filter(|(what, _)| *what != "empty")
        .collect()
}

/// Labels (kinds, display names, principals) a node refuses.
pub fn bad_labels() -> [(&'static str, String); 3] {
    [
        ("a control character", "kind\u{7}".to_string()),
        ("a newline", "a\nb".to_string()),
        ("257 bytes", long(257)),
    ]
}

/// Request and lease ids a node refuses.
pub fn bad_ids(control: &str) -> [(&'static str, String); 2] {
    [
        ("129 bytes", long(129)),
        ("a control character", control.to_string()),
    ]
}
