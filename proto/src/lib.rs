//! Tenure's wire types: the public `tenure.v1` API and the internal Raft service.
//! `proto/*.proto` is the source of truth; this crate only compiles it.

pub mod contract;
#[cfg(test)]
mod spec_coverage;

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

/// A failed call in a few words: its message, and the cause under it when the transport
/// failed (`tcp connect error: Connection refused (os error 111)`), where the status's own
/// `Display` prints every field and the whole chain of sources.
pub fn describe(status: &tonic::Status) -> String {
    let mut cause: Option<&dyn std::error::Error> = std::error::Error::source(status);
    let mut root = None;
    while let Some(error) = cause {
        root = Some(error);
        cause = error.source();
    }
    match root.map(ToString::to_string) {
        Some(root) if !status.message().contains(&root) => {
            format!("{}: {root}", status.message())
        }
        _ => status.message().to_string(),
    }
}

/// Whether `addr` (`HOST:PORT`, `[V6]:PORT`, a bare host, or any of these behind `http://` or
/// `https://`) names this machine only: `localhost`, 127.0.0.0/8 or ::1. Anything else,
/// `0.0.0.0` and host names included, may be reached from a network. The node refuses to
/// serve such an address without auth, and the clients to send a token to one in clear.
pub fn is_loopback(addr: &str) -> bool {
    let addr = addr
        .trim()
        .trim_start_matches("http://")
        .trim_start_matches("https://");
    let addr = addr.split('/').next().unwrap_or(addr);
    if let Ok(socket) = addr.parse::<std::net::SocketAddr>() {
        return socket.ip().is_loopback();
    }
    let host = match addr.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') && port.parse::<u16>().is_ok() => host,
        _ => addr,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::is_loopback;

    #[test]
    fn only_addresses_of_this_machine_are_loopback() {
        for local in [
            "127.0.0.1:7101",
            "127.8.9.10:1",
            "localhost:7101",
            "LOCALHOST",
            "[::1]:7101",
            "::1",
            "http://127.0.0.1:7101",
            "https://localhost:7101/",
        ] {
            assert!(is_loopback(local), "{local}");
        }
        for open in [
            "0.0.0.0:7101",
            "[::]:7101",
            "10.0.0.1:7101",
            "tenure-1:7101",
            "localhost.example.com:7101",
            "http://192.168.1.2:7101",
            "",
        ] {
            assert!(!is_loopback(open), "{open}");
        }
    }
}
