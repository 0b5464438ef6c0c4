//! Generates the gRPC code with the vendored protoc: no system protoc needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    std::env::set_var("PROTOC", protoc);
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .file_descriptor_set_path(out_dir.join("tenure_descriptor.bin"))
        .compile_protos(
            &[
                "tenure/v1/leases.proto",
                "tenure/v1/cluster.proto",
                "tenure/raft/v1/raft.proto",
            ],
            &["."],
        )?;
    println!("cargo:rerun-if-changed=tenure");
    Ok(())
}
