//! What `/proc` tells about a node: its memory, its CPU time, and whether it listens.

use std::time::Duration;

use super::Procs;

impl Procs {
    /// Node `id`'s resident set size in bytes (`VmRSS`), if it runs.
    pub fn rss_bytes(&self, id: u64) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid(id)?)).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }

    /// CPU time (user + system) node `id` has used, if it runs.
    pub fn cpu_time(&self, id: u64) -> Option<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid(id)?)).ok()?;
        // "PID (comm) STATE …": utime and stime are fields 14 and 15, i.e. the 12th and 13th
        // after the state.
        let mut after = stat.rsplit_once(") ")?.1.split_whitespace().skip(11);
        let utime: u64 = after.next()?.parse().ok()?;
        let stime: u64 = after.next()?.parse().ok()?;
        let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .unwrap_or(100) as u64;
        Some(Duration::from_millis((utime + stime) * 1000 / ticks))
    }

    /// File descriptors node `id` holds open, if it runs.
    pub fn descriptors(&self, id: u64) -> Option<u64> {
        let fds = std::fs::read_dir(format!("/proc/{}/fd", self.pid(id)?)).ok()?;
        Some(fds.count() as u64)
    }

    /// Bytes node `id`'s data directory takes on disk (its log, snapshots and state).
    pub fn disk_bytes(&self, id: u64) -> u64 {
        fn size(path: &std::path::Path) -> u64 {
            let Ok(entries) = std::fs::read_dir(path) else {
                return 0;
            };
            entries
                .flatten()
                .map(|entry| match entry.metadata() {
                    Ok(meta) if meta.is_dir() => size(&entry.path()),
                    Ok(meta) => meta.len(),
                    Err(_) => 0,
                })
                .sum()
        }
        size(&self.data_dir(id))
    }

    /// Context switches, voluntary and not, of node `id`'s threads so far (of those alive
    /// now: a thread that ended took its count with it).
    pub fn context_switches(&self, id: u64) -> Option<u64> {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.pid(id)?)).ok()?;
        let mut switches = 0;
        for task in tasks.flatten() {
            let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
                continue;
            };
            for line in status.lines() {
                if let Some(count) = line
                    .strip_prefix("voluntary_ctxt_switches:")
                    .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
                {
                    switches += count.trim().parse::<u64>().unwrap_or(0);
                }
            }
        }
        Some(switches)
    }
}

/// Whether process `pid` holds a listening TCP socket: one of its descriptors is a socket whose
/// inode `/proc/PID/net/tcp{,6}` (its own network namespace) lists in state LISTEN.
pub(super) fn listens(pid: u32) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    let sockets: std::collections::HashSet<String> = fds
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy().into_owned();
            let inode = target.strip_prefix("socket:[")?.strip_suffix(']')?;
            Some(inode.to_string())
        })
        .collect();
    ["tcp", "tcp6"].iter().any(|table| {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        text.lines().skip(1).any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
            fields.get(3) == Some(&"0A") && fields.get(9).is_some_and(|i| sockets.contains(*i))
        })
    })
}
