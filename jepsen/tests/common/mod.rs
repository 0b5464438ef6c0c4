//! What the namespace tests share: one test at a time, and a skip where they cannot run.
#![allow(dead_code)] // each test file uses a different part

use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

/// The namespaces are machine-wide: one test at a time, whatever --test-threads says.
pub static SERIAL: Mutex<()> = Mutex::new(());

pub const QUICK: Duration = Duration::from_millis(1500);

pub fn is_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
}

pub fn namespaces() -> Vec<String> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("t-"))
        .map(str::to_string)
        .collect()
}

/// Why these tests cannot run here, if they cannot.
pub fn unsupported() -> Option<String> {
    if !is_root() {
        return Some("not root".into());
    }
    let ok = |tool: &str, args: &[&str]| {
        Command::new(tool)
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !ok("ip", &["netns", "list"]) {
        return Some("`ip netns` unavailable".into());
    }
    if !ok("nft", &["--version"]) {
        return Some("`nft` missing (apt-get install -y nftables)".into());
    }
    let left = namespaces();
    if !left.is_empty() {
        return Some(format!("t-* namespaces exist (another run?): {left:?}"));
    }
    None
}

#[macro_export]
macro_rules! skip_unless_supported {
    ($test:literal) => {
        if let Some(why) = common::unsupported() {
            eprintln!("note: skipping {}: {why}", $test);
            return;
        }
    };
}
