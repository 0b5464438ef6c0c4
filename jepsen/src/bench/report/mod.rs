//! The side-by-side Markdown table, the performance targets judged against it (throughput,
//! latency and failover against etcd; memory, restart and renew throughput at 1M leases), and
//! the scale table.

use std::fmt::Write;

use super::cluster::System;
use super::{BenchOptions, Cell, Results, Workload};

fn ms(us: u64) -> String {
    format!("{:.2}", us as f64 / 1000.0)
}

fn find(results: &Results, system: System, workload: Workload, clients: usize) -> Option<&Cell> {
    results
        .cells
        .iter()
        .find(|c| c.system == system && c.workload == workload && c.clients == clients)
}

fn ratio(ours: f64, theirs: f64) -> String {
    if theirs > 0.0 && ours.is_finite() && theirs.is_finite() {
        format!("{:.2}×", ours / theirs)
    } else {
        "–".into()
    }
}

/// The HTTP/JSON gateway beside gRPC, where both were measured: the gateway's overhead.
fn gateway_table(out: &mut String, results: &Results) {
    let mut rows: Vec<(Workload, usize)> = results
        .cells
        .iter()
        .filter(|c| c.system == System::TenureHttp)
        .map(|c| (c.workload, c.clients))
        .collect();
    rows.sort();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n| through the gateway | clients | gRPC ops/s | HTTP ops/s | HTTP ÷ gRPC | gRPC p50 / p99 ms | HTTP p50 / p99 ms | added p50 ms | CPU s/1k gRPC / HTTP | errors HTTP |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (workload, clients) in rows {
        let Some(h) = find(results, System::TenureHttp, workload, clients) else {
            continue;
        };
        let g = find(results, System::Tenure, workload, clients);
        let _ = writeln!(
            out,
            "| {} | {clients} | {} | {:.0} | {} | {} | {} / {} | {} | {} / {:.3} | {} |",
            workload.name(),
            g.map_or("–".into(), |g| format!("{:.0}", g.ops_per_s)),
            h.ops_per_s,
            g.map_or("–".into(), |g| ratio(h.ops_per_s, g.ops_per_s)),
            g.map_or("–".into(), |g| format!(
                "{} / {}",
                ms(g.p50_us),
                ms(g.p99_us)
            )),
            ms(h.p50_us),
            ms(h.p99_us),
            g.map_or("–".into(), |g| {
                format!("{:+.2}", (h.p50_us as f64 - g.p50_us as f64) / 1000.0)
            }),
            g.map_or("–".into(), |g| format!("{:.3}", g.cpu_s_per_1k)),
            h.cpu_s_per_1k,
            h.errors,
        );
    }
}

/// The table of measured cells: one row per workload and client count, both systems.
fn cells_table(out: &mut String, options: &BenchOptions, results: &Results) {
    let _ = writeln!(
        out,
        "Each cell: {} s measured after {} s of warm-up; closed loop, each client with its own connections. CPU: user + system seconds of the three server processes per 1,000 ops; switches: their threads' context switches per op. Ratio: Tenure ÷ etcd ops/s.\n",
        options.duration.as_secs_f64(),
        options.warmup.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "| workload | clients | Tenure ops/s | etcd ops/s | ratio | Tenure p50 / p99 / p999 ms | etcd p50 / p99 / p999 ms | Tenure CPU s/1k | etcd CPU s/1k | switches/op T / e | errors T / e |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let mut rows: Vec<(Workload, usize)> = results
        .cells
        .iter()
        .map(|c| (c.workload, c.clients))
        .collect();
    rows.sort();
    rows.dedup();
    for (workload, clients) in rows {
        let t = find(results, System::Tenure, workload, clients);
        let e = find(results, System::Etcd, workload, clients);
        let rate = |c: Option<&Cell>| c.map_or("–".into(), |c| format!("{:.0}", c.ops_per_s));
        let lat = |c: Option<&Cell>| {
            c.map_or("–".into(), |c| {
                format!("{} / {} / {}", ms(c.p50_us), ms(c.p99_us), ms(c.p999_us))
            })
        };
        let cpu = |c: Option<&Cell>| c.map_or("–".into(), |c| format!("{:.3}", c.cpu_s_per_1k));
        let switches =
            |c: Option<&Cell>| c.map_or("–".into(), |c| format!("{:.1}", c.switches_per_op));
        let errors = |c: Option<&Cell>| c.map_or("–".into(), |c| c.errors.to_string());
        let _ = writeln!(
            out,
            "| {} | {clients} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} / {} |",
            workload.name(),
            rate(t),
            rate(e),
            match (t, e) {
                (Some(t), Some(e)) => ratio(t.ops_per_s, e.ops_per_s),
                _ => "–".into(),
            },
            lat(t),
            lat(e),
            cpu(t),
            cpu(e),
            switches(t),
            switches(e),
            errors(t),
            errors(e),
        );
    }
}

/// Each cell of two minutes or more, its throughput minute by minute, and its last five
/// minutes against its minutes 2–5 (how a long run ages: `jepsen/soak.sh`).
fn per_minute(out: &mut String, results: &Results) {
    let long: Vec<&Cell> = results
        .cells
        .iter()
        .filter(|c| c.per_minute_ops_per_s.len() >= 2)
        .collect();
    if long.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n| system | workload | clients | ops/s in each minute | last 5 min vs minutes 2–5 |"
    );
    let _ = writeln!(out, "|---|---|---:|---|---:|");
    for cell in long {
        let minutes = &cell.per_minute_ops_per_s;
        let each: Vec<String> = minutes.iter().map(|m| format!("{m:.0}")).collect();
        let mean = |range: &[f64]| range.iter().sum::<f64>() / range.len().max(1) as f64;
        let aged = match minutes.len() {
            n if n >= 10 => format!(
                "{:.0} %",
                100.0 * mean(&minutes[n - 5..]) / mean(&minutes[1..5]).max(f64::EPSILON)
            ),
            _ => "–".to_string(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {aged} |",
            cell.system.name(),
            cell.workload.name(),
            cell.clients,
            each.join(" "),
        );
    }
}

pub fn markdown(options: &BenchOptions, results: &Results) -> String {
    let mut out = String::new();
    if !results.cells.is_empty() {
        cells_table(&mut out, options, results);
    }
    gateway_table(&mut out, results);
    per_minute(&mut out, results);
    if !results.unprovoked_elections.is_empty() {
        let each: Vec<String> = results
            .unprovoked_elections
            .iter()
            .map(|(system, n)| format!("{} {n}", system.name()))
            .collect();
        let _ = writeln!(
            out,
            "\nElections during the throughput workloads (no faults; a false election under load would show here): {}.",
            each.join(", ")
        );
    }
    if !results.failovers.is_empty() {
        let _ = writeln!(
            out,
            "\n| failover (kill -9 the leader under {} lock clients) | each kill, ms | median ms |",
            options.failover_clients
        );
        let _ = writeln!(out, "|---|---|---:|");
        for f in &results.failovers {
            let each: Vec<String> = f.millis.iter().map(|m| format!("{m:.0}")).collect();
            let _ = writeln!(
                out,
                "| {} | {} | {:.0} |",
                f.system.name(),
                each.join(", "),
                f.median_ms()
            );
        }
    }
    let targets = targets(results);
    if !targets.is_empty() {
        let _ = writeln!(out, "\n| target | measured | met |");
        let _ = writeln!(out, "|---|---:|:---:|");
        for (name, measured, met) in targets {
            let _ = writeln!(
                out,
                "| {name} | {measured} | {} |",
                if met { "yes" } else { "**no**" }
            );
        }
    }
    if !results.scale.is_empty() {
        let _ = writeln!(
            out,
            "\n| active leases | load s | RSS per node MiB | snapshot MiB | snapshot build ms | renew ops/s (64 clients) | renew p50 / p99 ms | restart to serving ms | RSS after restart MiB | RSS after `--scale-hold` MiB |"
        );
        let _ = writeln!(out, "|---:|---:|---|---:|---:|---:|---:|---:|---|---|");
        let mib = |b: u64| format!("{:.0}", b as f64 / (1024.0 * 1024.0));
        let list = |v: &[u64]| v.iter().map(|b| mib(*b)).collect::<Vec<_>>().join(" / ");
        for p in &results.scale {
            let _ = writeln!(
                out,
                "| {} | {:.1} | {} | {:.1} | {:.0} | {:.0} | {} / {} | {:.0} | {} | {} |",
                p.leases,
                p.load_seconds,
                list(&p.rss_bytes),
                p.snapshot_bytes as f64 / (1024.0 * 1024.0),
                p.snapshot_build_ms,
                p.renew_ops_per_s,
                ms(p.renew_p50_us),
                ms(p.renew_p99_us),
                p.restart_to_serving_ms,
                list(&p.rss_after_restart_bytes),
                if p.rss_after_hold_bytes.is_empty() {
                    "–".to_string()
                } else {
                    list(&p.rss_after_hold_bytes)
                },
            );
        }
    }
    if let Some(p) = &results.sessions {
        let mib = |b: u64| format!("{:.0}", b as f64 / (1024.0 * 1024.0));
        let rss = p.rss_bytes.iter().map(|b| mib(*b)).collect::<Vec<_>>();
        let _ = writeln!(
            out,
            "\n| sessions | leases | ttl s | load s | renewals/s (errors) | leader CPU % of a core | 3 nodes CPU % | RSS per node MiB | expiry → all leases reclaimed p50 / p99 / max ms ({} sessions) |",
            p.expired
        );
        let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|---|---|");
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0} | {:.0} ({}) | {:.1} | {:.1} | {} | {:.0} / {:.0} / {:.0} |",
            p.sessions,
            p.leases,
            p.ttl_ms / 1000,
            p.load_seconds,
            p.renewals_per_s,
            p.renewal_errors,
            p.leader_cpu_percent,
            p.cluster_cpu_percent,
            rss.join(" / "),
            p.reclaim_p50_ms,
            p.reclaim_p99_ms,
            p.reclaim_max_ms,
        );
    }
    out
}

/// The targets this run measured: (target, measured, met). Throughput at 64 clients, the
/// single-client acquire p50, the handoff p50 and the failover p50 against etcd's; renewals
/// by the servers' CPU per renewal against etcd's per keepalive (the team's decision on issue
/// 21: renewals stay replicated, so that a new leader reclaims a dead holder's lease on time,
/// and are judged by what they cost, not by a throughput a leader-local renewal would buy),
/// with the throughput ratio beside it; at 1M leases, RSS per node right after the load,
/// restart to serving and renew throughput against 1k leases.
pub fn targets(results: &Results) -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    let pair = |w: Workload, c: usize| {
        Some((
            find(results, System::Tenure, w, c)?,
            find(results, System::Etcd, w, c)?,
        ))
    };
    let throughput = [
        (Workload::Lock, 5.0, "lock cycle at 64 clients ≥ 5× etcd"),
        (
            Workload::Read,
            2.0,
            "linearizable read at 64 clients ≥ 2× etcd",
        ),
    ];
    for (workload, goal, name) in throughput {
        if let Some((t, e)) = pair(workload, 64) {
            let r = t.ops_per_s / e.ops_per_s;
            out.push((name.to_string(), format!("{r:.2}×"), r >= goal));
        }
    }
    if let Some((t, e)) = pair(Workload::Renew, 64) {
        let (per_t, per_e) = (t.cpu_s_per_1k, e.cpu_s_per_1k);
        out.push((
            "renew at 64 clients: server CPU per renewal ≤ etcd's per keepalive".into(),
            format!(
                "{:.0} vs {:.0} µs ({:.2}×; throughput {:.2}× etcd)",
                per_t * 1000.0,
                per_e * 1000.0,
                per_t / per_e.max(f64::EPSILON),
                t.ops_per_s / e.ops_per_s.max(f64::EPSILON)
            ),
            per_t <= per_e,
        ));
    }
    if let Some((t, e)) = pair(Workload::Acquire, 1) {
        let r = t.p50_us as f64 / e.p50_us as f64;
        out.push((
            "single-client acquire p50 ≤ 1.0× etcd put p50".into(),
            format!("{r:.2}× ({} vs {} ms)", ms(t.p50_us), ms(e.p50_us)),
            r <= 1.0,
        ));
    }
    // Measured as the bench does it: the waiter queued 150 ms before the release.
    if let Some((t, e)) = pair(Workload::Handoff, 1) {
        let r = t.p50_us as f64 / e.p50_us.max(1) as f64;
        out.push((
            "contended handoff p50 ≤ 0.5× etcd (release sent → waiter granted)".into(),
            format!("{r:.2}× ({} vs {} ms)", ms(t.p50_us), ms(e.p50_us)),
            r <= 0.5,
        ));
    }
    let failover = |s: System| results.failovers.iter().find(|f| f.system == s);
    if let (Some(t), Some(e)) = (failover(System::Tenure), failover(System::Etcd)) {
        let r = t.median_ms() / e.median_ms();
        out.push((
            "failover p50 ≤ 0.5× etcd".into(),
            format!("{r:.2}× ({:.0} vs {:.0} ms)", t.median_ms(), e.median_ms()),
            r <= 0.5,
        ));
    }
    if let (Some(small), Some(large)) = (
        results.scale.iter().find(|p| p.leases == 1_000),
        results.scale.iter().find(|p| p.leases == 1_000_000),
    ) {
        let max_rss = large.rss_bytes.iter().copied().max().unwrap_or(0);
        out.push((
            "1M leases: ≤ 1 GiB RSS per node, right after the load (issue 39's)".into(),
            format!("{:.0} MiB", max_rss as f64 / (1024.0 * 1024.0)),
            max_rss <= 1 << 30,
        ));
        out.push((
            "1M leases: restart to serving ≤ 10 s".into(),
            format!("{:.1} s", large.restart_to_serving_ms / 1000.0),
            large.restart_to_serving_ms <= 10_000.0,
        ));
        let r = large.renew_ops_per_s / small.renew_ops_per_s;
        out.push((
            "renew throughput at 1M ≥ 90 % of at 1k".into(),
            format!("{:.0} %", r * 100.0),
            r >= 0.9,
        ));
    }
    out
}

#[cfg(test)]
mod tests;
