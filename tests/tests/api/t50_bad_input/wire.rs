//! Bad input below the request: messages over the transport limit, and bytes that do not
//! decode as the request at all.

use std::collections::HashMap;

use tenure_client::pb;
use tenure_proto::v1::leases_client::LeasesClient;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::{Code, Status};

use super::row::{acquire, long, ttl, Call, BAD, HOLDER, MIB};
use super::{expect_refused, send, CALL_TIMEOUT};

/// `AcquireRequest` with `bytes` where the real message has `string` (same tags), so the test
/// can put bytes on the wire that are not UTF-8.
#[derive(Clone, PartialEq, prost::Message)]
struct RawAcquireRequest {
    #[prost(bytes = "vec", tag = "1")]
    resource: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    holder: Vec<u8>,
    #[prost(message, optional, tag = "3")]
    ttl: Option<prost_types::Duration>,
    #[prost(map = "string, bytes", tag = "6")]
    metadata: HashMap<String, Vec<u8>>,
    #[prost(bytes = "vec", tag = "10")]
    request_id: Vec<u8>,
}

/// `AcquireRequest.resource` (a string, length-delimited) sent as a varint: a broken field.
#[derive(Clone, PartialEq, prost::Message)]
struct WrongWireType {
    #[prost(uint64, tag = "1")]
    resource: u64,
}

/// Messages over the 4 MiB transport limit: refused by the transport, RESOURCE_EXHAUSTED.
pub async fn oversized(channel: Channel, node: u64) {
    // The client's own limit must not refuse them first.
    let mut client = LeasesClient::new(channel).max_encoding_message_size(64 * MIB);
    for (what, bytes) in [("10 MiB", 10 * MIB), ("4.5 MiB", 4 * MIB + MIB / 2)] {
        let request = pb::AcquireRequest {
            metadata: [("k".to_string(), "v".repeat(bytes))].into_iter().collect(),
            ..acquire(BAD, HOLDER)
        };
        let result = send(&mut client, Call::Acquire(request)).await;
        expect_refused(
            &format!("node {node}: acquire with a metadata value of {what}"),
            result,
            Code::ResourceExhausted,
            "resource_exhausted",
        );
    }
    let result = send(
        &mut client,
        Call::GetResource(pb::GetResourceRequest {
            name: long(5 * MIB),
            consistency: 0,
        }),
    )
    .await;
    expect_refused(
        &format!("node {node}: get_resource with a 5 MiB name"),
        result,
        Code::ResourceExhausted,
        "resource_exhausted",
    );
}

/// Bytes that do not decode as an `AcquireRequest`: INVALID_ARGUMENT, never INTERNAL.
pub async fn undecodable(channel: Channel, node: u64) {
    let valid = || RawAcquireRequest {
        resource: BAD.into(),
        holder: HOLDER.into(),
        ttl: ttl(600, 0),
        metadata: HashMap::new(),
        request_id: Vec::new(),
    };
    let bad_utf8: Vec<(&str, RawAcquireRequest)> = vec![
        (
            "resource 0xff 0xfe",
            RawAcquireRequest {
                resource: vec![0xff, 0xfe],
                ..valid()
            },
        ),
        (
            "holder with a truncated sequence",
            RawAcquireRequest {
                holder: vec![b'h', 0xc3],
                ..valid()
            },
        ),
        (
            "resource and holder overlong '/'",
            RawAcquireRequest {
                resource: vec![0xc0, 0xaf],
                holder: vec![0xc0, 0xaf],
                ..valid()
            },
        ),
        (
            "holder with a lone surrogate",
            RawAcquireRequest {
                holder: vec![0xed, 0xa0, 0x80],
                ..valid()
            },
        ),
        (
            "a metadata value 0x80",
            RawAcquireRequest {
                metadata: [("k".to_string(), vec![0x80])].into_iter().collect(),
                ..valid()
            },
        ),
        (
            "request_id 0xfe",
            RawAcquireRequest {
                request_id: vec![0xfe],
                ..valid()
            },
        ),
    ];
    for (what, message) in bad_utf8 {
        expect_refused(
            &format!("node {node}: acquire with bad UTF-8 in {what}"),
            raw_acquire(channel.clone(), message).await,
            Code::InvalidArgument,
            "invalid_argument",
        );
    }
    expect_refused(
        &format!("node {node}: acquire with resource sent as a varint"),
        raw_acquire(channel, WrongWireType { resource: 7 }).await,
        Code::InvalidArgument,
        "invalid_argument",
    );
}

/// Sends `message` to `Leases.Acquire` as it is, bounded by [`CALL_TIMEOUT`].
async fn raw_acquire<M>(channel: Channel, message: M) -> Result<pb::AcquireResponse, Status>
where
    M: prost::Message + Send + Sync + 'static,
{
    const ACQUIRE: &str = "/tenure.v1.Leases/Acquire";
    let mut grpc = tonic::client::Grpc::new(channel);
    let answer = async {
        grpc.ready()
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        let codec = tonic_prost::ProstCodec::<M, pb::AcquireResponse>::default();
        grpc.unary(
            tonic::Request::new(message),
            PathAndQuery::from_static(ACQUIRE),
            codec,
        )
        .await
    };
    tokio::time::timeout(CALL_TIMEOUT, answer)
        .await
        .expect("the node answered in time")
        .map(tonic::Response::into_inner)
}
