//! The phases' Markdown table against the targets.

use super::{quota, Phase, DESCRIPTOR_BOUND, QUOTA_RSS_ALLOWANCE};

/// The phases as a Markdown table, each attack against the quiet phases on either side of it
/// (their mean: the honest clients' throughput and p99 and the nodes' memory as they would
/// have been without the attack), with each node's most descriptors (against
/// [`DESCRIPTOR_BOUND`]) and how much its data directory grew; and whether every attack met
/// the targets.
pub fn table(phases: &[Phase]) -> (String, bool) {
    let mib = |bytes: f64| bytes / (1024.0 * 1024.0);
    let per_node = |values: &[f64]| {
        values
            .iter()
            .map(|b| format!("{:.0}", mib(*b)))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    let mut met = true;
    let mut text = String::from(
        "| phase | honest ops/s | vs quiet | honest p99 ms | vs quiet | errors | max RSS per node (MiB) | bound (MiB) | max fds per node | disk grown per node (MiB) | target | attack |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (index, phase) in phases.iter().enumerate() {
        let around: Vec<&Phase> = [index.checked_sub(1), Some(index + 1)]
            .into_iter()
            .flatten()
            .filter_map(|i| phases.get(i))
            .filter(|p| p.name == "quiet")
            .collect();
        let rss: Vec<f64> = phase.rss_max.iter().map(|b| *b as f64).collect();
        let mut cells = [String::new(), String::new(), String::new(), String::new()];
        if phase.name != "quiet" && !around.is_empty() {
            let mean = |f: &dyn Fn(&Phase) -> f64| {
                around.iter().map(|p| f(p)).sum::<f64>() / around.len() as f64
            };
            let throughput =
                phase.honest_ops_per_s / mean(&|p| p.honest_ops_per_s).max(f64::EPSILON);
            let p99 = phase.honest_p99_ms / mean(&|p| p.honest_p99_ms).max(f64::EPSILON);
            let bounds: Vec<f64> = (0..rss.len())
                .map(|node| {
                    let quiet = mean(&|p| p.rss_max[node] as f64);
                    if quota::ATTACKS.contains(&phase.name) {
                        quiet + QUOTA_RSS_ALLOWANCE as f64
                    } else {
                        2.0 * quiet
                    }
                })
                .collect();
            let memory = rss.iter().zip(&bounds).all(|(rss, bound)| rss <= bound);
            let descriptors = phase.fds_max.iter().all(|fds| *fds <= DESCRIPTOR_BOUND);
            // Without honest clients (`--honest 0`, the attack alone) only memory and
            // descriptors are held to a target.
            let honest = mean(&|p| p.honest_ops_per_s) > 0.0;
            let ok = (!honest || (throughput >= 0.8 && p99 <= 2.0)) && memory && descriptors;
            met &= ok;
            let [throughput, p99] = match honest {
                true => [format!("{:.0} %", throughput * 100.0), format!("{p99:.2}×")],
                false => ["—".to_string(), "—".to_string()],
            };
            cells = [
                throughput,
                p99,
                per_node(&bounds),
                if ok { "met" } else { "MISSED" }.into(),
            ];
        }
        let [throughput, p99, bound, target] = cells;
        let fds = phase
            .fds_max
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(" / ");
        let disk: Vec<f64> = phase.disk_grown.iter().map(|b| *b as f64).collect();
        text.push_str(&format!(
            "| {} | {:.0} | {throughput} | {:.1} | {p99} | {} | {} | {bound} | {fds} | {} | {target} | {} |\n",
            phase.name,
            phase.honest_ops_per_s,
            phase.honest_p99_ms,
            phase.honest_errors,
            per_node(&rss),
            per_node(&disk),
            if phase.noisy_peak.is_empty() || !quota::ATTACKS.contains(&phase.name) {
                phase.attack.clone()
            } else {
                format!("{}; it held at most {}", phase.attack, phase.noisy_peak)
            }
        ));
    }
    (text, met)
}
