//! The `ip` and `nft` commands the hosts are made of.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{anyhow, bail, Context, Result};

use super::PREFIX;

/// Absolute paths of `ip` and `nft`, or a clear error naming what to install.
pub(super) struct Tools {
    pub(super) ip: PathBuf,
    pub(super) nft: PathBuf,
}

impl Tools {
    pub(super) fn find() -> Result<Tools> {
        Ok(Tools {
            ip: find_tool("ip", "iproute2")?,
            nft: find_tool("nft", "nftables")?,
        })
    }

    /// Runs `ip ARGS…`, failing with the command and its stderr.
    pub(super) fn ip(&self, args: &[&str]) -> Result<String> {
        run(Command::new(&self.ip).args(args), None)
    }

    /// Runs an nft script inside a namespace, atomically (`nft -f -`).
    pub(super) fn nft(&self, ns: &str, script: &str) -> Result<String> {
        let mut cmd = Command::new(&self.ip);
        cmd.args(["netns", "exec", ns])
            .arg(&self.nft)
            .args(["-f", "-"]);
        run(&mut cmd, Some(script))
    }

    pub(super) fn namespaces(&self) -> Result<Vec<String>> {
        let out = self.ip(&["netns", "list"])?;
        Ok(out
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|n| n.starts_with(PREFIX))
            .map(str::to_string)
            .collect())
    }

    /// Processes whose network namespace is `ns`, this process excepted.
    pub(super) fn pids(&self, ns: &str) -> Result<Vec<i32>> {
        let me = std::process::id() as i32;
        let out = self.ip(&["netns", "pids", ns])?;
        Ok(out
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .filter(|&p| p != me)
            .collect())
    }
}

fn find_tool(name: &str, package: &str) -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| anyhow!("`{name}` not found: install it (`apt-get install -y {package}`)"))
}

pub(super) fn run(cmd: &mut Command, stdin: Option<&str>) -> Result<String> {
    let shown = format!("{cmd:?}").replace('"', "");
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {shown}"))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        bail!("{shown} failed ({}): {}", out.status, err.trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
