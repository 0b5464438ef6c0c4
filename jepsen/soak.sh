#!/usr/bin/env bash
# A soak: a three-node Tenure cluster under steady load for a long while, sampling every
# node's resident memory and bytes on disk (the data directory: sled's log files, its
# snapshots) as it goes. The question it answers: do memory, disk and throughput level off,
# or grow and fall?
#
#   jepsen/soak.sh [DURATION] [CLIENTS] [WORKLOAD]      (defaults: 15m 16 renew)
#   SYSTEMS=tenure,etcd jepsen/soak.sh 30m 16 lock      (each system in turn, same load)
#
# The load is `tenure-jepsen bench` (its clusters, on loopback). `renew` keeps one lease per
# client alive: the lease state is constant, and renews are not exactly-once, so nothing
# should grow. `lock` runs acquire + release cycles on fresh names: what grows is the
# history (bounded by events and bytes) and the exactly-once records (10 minutes of request
# ids, SPEC §5). Prints one line per sample (seconds; the system; per node RSS MiB and data
# MiB; the exactly-once MiB node 1 counts, Tenure only; the three servers' CPU seconds so far)
# and writes them to OUT/soak.tsv; the bench's table ends with each system's throughput
# minute by minute (OUT/results.md), and a last line gives the servers' CPU per 1,000 ops in
# minutes 2–5 and in the last five (what the work cost, apart from how much of the machine
# it was given). A minute before Tenure's load ends, node 1 builds a snapshot: its cost goes
# to OUT/snapshot.txt.
# With etcd in SYSTEMS, jepsen/bench.sh installs and builds what etcd needs first.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-15m}
clients=${2:-16}
workload=${3:-renew}
out=${OUT:-bench-runs/soak-$(date +%s)}
every=${EVERY:-30}
systems=${SYSTEMS:-tenure}

case ",$systems," in
  # bench.sh installs etcd when missing and builds tenured, and tenure-jepsen with the etcd
  # feature (its way: a build of the whole workspace here would only be built again).
  *,etcd,*)
    cargo build --release -p tenure-cli --bin tenure
    jepsen/bench.sh --help >/dev/null
    ;;
  *) cargo build --release --bin tenured --bin tenure --bin tenure-jepsen ;;
esac
mkdir -p "$out"
target/release/tenure-jepsen bench --systems "$systems" --workloads "$workload" --clients "$clients" \
  --warmup 1s --duration "$duration" --out "$out" >"$out/bench.log" 2>&1 &
bench=$!
trap 'kill $bench 2>/dev/null || true' INT TERM

printf 't_s\tsystem\tn1_rss_mib\tn2_rss_mib\tn3_rss_mib\tn1_disk_mib\tn2_disk_mib\tn3_disk_mib\tn1_exactly_once_mib\tcpu_s\n' | tee "$out/soak.tsv"
# The exactly-once bytes node 1 counts (every bench client is the admin `anonymous`, so its
# usage is the whole table), from `tenure cluster status` at the node's own address.
exactly_once() {
  local addr
  addr=$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | sed -n 's/.*--listen \([^ ]*\).*/\1/p')
  [ -n "$addr" ] || { echo 0; return; }
  target/release/tenure --endpoints "$addr" --output json cluster status 2>/dev/null | python3 -c '
import json, sys
used = 0
for node in json.load(sys.stdin):
    for top in node.get("top_principals", []):
        for q in top["quotas"]:
            if q["quota"] == "exactly_once_bytes":
                used += q["used"]
print(used // 1048576)' 2>/dev/null || echo 0
}
# A minute before Tenure's load ends, one snapshot on node 1, asked for while the load runs:
# its size, its build's wall and CPU time (the CPU of the thread that built it), and node 1's
# RSS just before and after (OUT/snapshot.txt).
seconds() { case $1 in *h) echo $(( ${1%h} * 3600 ));; *m) echo $(( ${1%m} * 60 ));; *s) echo "${1%s}";; *) echo "$1";; esac; }
snapshot_at=$(( $(seconds "$duration") - 60 ))
snapshotted=""
snapshot_now() {
  local pid=$1 addr before after line
  addr=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | sed -n 's/.*--listen \([^ ]*\).*/\1/p')
  before=$(awk '/^VmRSS:/ {print int($2 / 1024)}' "/proc/$pid/status")
  line=$(target/release/tenure --endpoints "$addr" cluster snapshot 2>&1 || true)
  after=$(awk '/^VmRSS:/ {print int($2 / 1024)}' "/proc/$pid/status")
  echo "snapshot on node 1 at ${2}s: $line; RSS ${before} MiB before, ${after} MiB after" | tee -a "$out/snapshot.txt"
}
start=$(date +%s)
while kill -0 "$bench" 2>/dev/null; do
  row="$(( $(date +%s) - start ))"
  # The system whose cluster runs now (each system's members run from OUT/data/<system>).
  system="" data=""
  for s in ${systems//,/ }; do
    if pgrep -f -- "--data-dir $out/data/$s/n1( |$)" >/dev/null; then
      system=$s data="$out/data/$s"
    fi
  done
  if [ -z "$system" ]; then sleep 1; continue; fi
  rss="" disk="" ticks=0
  for n in 1 2 3; do
    pid=$(pgrep -f -- "--data-dir $data/n$n( |$)" | head -1 || true)
    # utime + stime of the whole process (threads that ended included), in clock ticks.
    t=$( [ -n "$pid" ] && awk '{sub(/.*\) /, ""); print $12 + $13}' "/proc/$pid/stat" 2>/dev/null || echo 0)
    ticks=$(( ticks + ${t:-0} ))
    kib=$( [ -n "$pid" ] && awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    bytes=$( [ -d "$data/n$n" ] && du -sb "$data/n$n" 2>/dev/null | cut -f1 || echo 0)
    rss+=$'\t'"$(( ${kib:-0} / 1024 ))"
    disk+=$'\t'"$(( ${bytes:-0} / 1048576 ))"
  done
  eo=-
  if [ "$system" = tenure ]; then
    n1=$(pgrep -f -- "--data-dir $data/n1( |$)" | head -1 || true)
    eo=$( [ -n "$n1" ] && exactly_once "$n1" || echo 0)
    if [ -z "$snapshotted" ] && [ -n "$n1" ] && [ "$row" -ge "$snapshot_at" ]; then
      snapshot_now "$n1" "$row"
      snapshotted=yes
    fi
  fi
  cpu=$(awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.1f", t / hz}')
  printf '%s\t%s%s%s\t%s\t%s\n' "$row" "$system" "$rss" "$disk" "$eo" "$cpu" | tee -a "$out/soak.tsv"
  sleep "$every"
done
wait "$bench" || { echo "the load failed: $out/bench.log" >&2; exit 1; }
grep -E '^\| (tenure|etcd|renew|lock|contended|read|acquire) ' "$out/results.md" || true
# The servers' CPU per 1,000 ops in minutes 2–5 and in the last five: what a slower minute
# cost the servers, apart from how much of the machine they were given in it. Each system's
# time counts from its first sample (its cluster's start, within a second of its load's).
python3 - "$out" <<'PY' || true
import json, sys
out = sys.argv[1]
rows = {}
for line in open(f"{out}/soak.tsv").read().splitlines()[1:]:
    f = line.split("\t")
    if len(f) >= 10:
        rows.setdefault(f[1], []).append((int(f[0]), float(f[9])))
def cpu_at(samples, t):
    for (t0, c0), (t1, c1) in zip(samples, samples[1:]):
        if t0 <= t <= t1:
            return c0 + (c1 - c0) * (t - t0) / max(t1 - t0, 1)
    return None
for cell in json.load(open(f"{out}/results.json"))["cells"]:
    system, minutes = cell["system"], cell.get("per_minute_ops_per_s") or []
    samples = rows.get(system, [])
    if len(minutes) < 10 or len(samples) < 2:
        continue
    origin = samples[0][0]
    # A sample taken as the cluster stopped reads less than the one before: left out.
    kept = []
    for t, c in samples:
        if not kept or c >= kept[-1][1]:
            kept.append((t - origin, c))
    def ops_between(a, b):
        return sum(rate * max(0, min(b, 60 * (i + 1)) - max(a, 60 * i)) for i, rate in enumerate(minutes))
    def per_1k(a, b):
        b = min(b, kept[-1][0])
        ca, cb, ops = cpu_at(kept, a), cpu_at(kept, b), ops_between(a, b)
        return None if ca is None or cb is None or ops == 0 else 1000 * (cb - ca) / ops
    n = len(minutes)
    early, late = per_1k(60, 300), per_1k((n - 5) * 60, n * 60)
    if early and late:
        print(f"{system}: servers' CPU s per 1k ops, minutes 2–5 {early:.3f}, minutes {n - 4}–{n} {late:.3f} ({100 * late / early:.0f} %)")
PY
echo "samples: $out/soak.tsv"
