//! gRPC server reflection that describes the internal Raft service only to authenticated
//! callers: the gate (`grpc::gate`) lets anyone in, and puts a [`Caller`] in the requests of
//! those with a known token.

use std::convert::Infallible;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::server::NamedService;

use crate::auth::Caller;

/// Server reflection that describes the internal Raft service only to authenticated callers
/// (the gate put a [`Caller`] in the request): everyone else sees the public API alone.
#[derive(Clone)]
pub struct Reflection<S> {
    pub public: S,
    pub full: S,
}

impl<S> Reflection<S> {
    /// The two reflection servers `build` makes: of every service, and of the public ones.
    pub fn build(
        build: impl Fn(
            tonic_reflection::server::Builder<'static>,
        ) -> Result<S, tonic_reflection::server::Error>,
    ) -> Result<Self, tonic_reflection::server::Error> {
        let with = |files: &'static [u8]| {
            build(
                tonic_reflection::server::Builder::configure()
                    .register_encoded_file_descriptor_set(files),
            )
        };
        Ok(Reflection {
            full: with(tenure_proto::FILE_DESCRIPTOR_SET)?,
            public: with(public_descriptors())?,
        })
    }
}

impl<S> NamedService for Reflection<S>
where
    S: NamedService,
{
    const NAME: &'static str = S::NAME;
}

impl<S> tower::Service<http::Request<Body>> for Reflection<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
        + Clone,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = S::Future;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // tonic's generated servers are always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        if request.extensions().get::<Caller>().is_some() {
            self.full.call(request)
        } else {
            self.public.call(request)
        }
    }
}

/// The file descriptor set without the internal `tenure.raft.v1` package.
pub fn public_descriptors() -> &'static [u8] {
    static PUBLIC: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    PUBLIC.get_or_init(|| {
        use prost::Message;
        let Ok(mut files) =
            prost_types::FileDescriptorSet::decode(tenure_proto::FILE_DESCRIPTOR_SET)
        else {
            return Vec::new();
        };
        files
            .file
            .retain(|file| !file.package().starts_with("tenure.raft"));
        files.encode_to_vec()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_public_descriptors_leave_out_the_internal_service() {
        use prost::Message;
        let files = prost_types::FileDescriptorSet::decode(public_descriptors()).expect("decodes");
        let packages: Vec<&str> = files.file.iter().map(|f| f.package()).collect();
        assert!(packages.contains(&"tenure.v1"), "{packages:?}");
        assert!(!packages.iter().any(|p| p.starts_with("tenure.raft")));
    }
}
