//! Tenure's wire types: the public `tenure.v1` API and the internal Raft service.
//! `proto/*.proto` is the source of truth; this crate only compiles it.

pub mod v1 {
    tonic::include_proto!("tenure.v1");
}

pub mod raft {
    pub mod v1 {
        tonic::include_proto!("tenure.raft.v1");
    }
}

/// The encoded file descriptor set, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("tenure_descriptor");
