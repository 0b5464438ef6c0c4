#!/usr/bin/env bash
# A soak: a three-node Tenure cluster under steady load for a long while, sampling every
# node's resident memory and bytes on disk (the data directory: sled's log files, its
# snapshots) as it goes. The question it answers: do memory and disk level off, or grow?
#
#   jepsen/soak.sh [DURATION] [CLIENTS] [WORKLOAD]      (defaults: 15m 16 renew)
#
# The load is `tenure-jepsen bench` (its cluster, on loopback). `renew` keeps one lease per
# client alive, so the lease state is constant and what grows is what the design keeps for
# a while: the exactly-once records (10 minutes of request ids, SPEC §5). Prints one line per
# sample (seconds, then per node RSS MiB and data MiB) and writes them to OUT/soak.tsv.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-15m}
clients=${2:-16}
workload=${3:-renew}
out=${OUT:-bench-runs/soak-$(date +%s)}
every=${EVERY:-30}

cargo build --release --bin tenured --bin tenure-jepsen
mkdir -p "$out"
target/release/tenure-jepsen bench --systems tenure --workloads "$workload" --clients "$clients" \
  --warmup 1s --duration "$duration" --out "$out" >"$out/bench.log" 2>&1 &
bench=$!
trap 'kill $bench 2>/dev/null || true' INT TERM

data="$out/data/tenure"
printf 't_s\tn1_rss_mib\tn2_rss_mib\tn3_rss_mib\tn1_disk_mib\tn2_disk_mib\tn3_disk_mib\n' | tee "$out/soak.tsv"
start=$(date +%s)
while kill -0 "$bench" 2>/dev/null; do
  row="$(( $(date +%s) - start ))"
  rss="" disk=""
  for n in 1 2 3; do
    pid=$(pgrep -f -- "--data-dir $data/n$n( |$)" | head -1 || true)
    kib=$( [ -n "$pid" ] && awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    bytes=$( [ -d "$data/n$n" ] && du -sb "$data/n$n" 2>/dev/null | cut -f1 || echo 0)
    rss+=$'\t'"$(( ${kib:-0} / 1024 ))"
    disk+=$'\t'"$(( ${bytes:-0} / 1048576 ))"
  done
  printf '%s%s%s\n' "$row" "$rss" "$disk" | tee -a "$out/soak.tsv"
  sleep "$every"
done
wait "$bench" || { echo "the load failed: $out/bench.log" >&2; exit 1; }
grep -E '^\| (renew|lock|contended|read|acquire) ' "$out/results.md" || true
echo "samples: $out/soak.tsv"
