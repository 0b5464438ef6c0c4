#!/usr/bin/env bash
# Benchmarks Tenure side by side with etcd on this machine (see docs/benchmarks.md):
#   jepsen/bench.sh                       # every workload at 1, 16 and 64 clients, both systems
#   jepsen/bench.sh --scale 1000,100000,1000000   # and the scale run (Tenure)
# Arguments go to `tenure-jepsen bench` (`--help` lists them). Installs Debian's etcd-server
# when etcd is missing, builds release binaries (tenured only without $TENURED_BIN), prints
# the Markdown table and writes it, with the raw numbers, to bench-runs/<unix time>/.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v etcd >/dev/null 2>&1; then
  sudo_=()
  [ "$(id -u)" -eq 0 ] || sudo_=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_[@]}" apt-get update -qq
  "${sudo_[@]}" apt-get install -y -qq etcd-server
fi
# The package starts a system etcd on 2379/2380 where systemd runs; the benchmark starts its
# own members on free loopback ports and leaves that one alone.

# etcd-client compiles etcd's protos: give it the protoc Tenure vendors (no system protoc).
if [ -z "${PROTOC:-}" ]; then
  PROTOC=$(cargo metadata --format-version 1 --locked 2>/dev/null | python3 -c '
import json, os, sys
for p in json.load(sys.stdin)["packages"]:
    if p["name"] == "protoc-bin-vendored-linux-x86_64":
        print(os.path.join(os.path.dirname(p["manifest_path"]), "bin", "protoc"))
        break
')
  export PROTOC
fi
[ -x "$PROTOC" ] || { echo "no protoc found (set PROTOC)" >&2; exit 2; }

# BENCH_PROFILE=dev builds unoptimised binaries (CI's smoke run); numbers need release.
profile=${BENCH_PROFILE:-release}
dir=$([ "$profile" = dev ] && echo debug || echo "$profile")
# TENURED_BIN (read by `tenure-jepsen bench`) names a tenured already built; else build one.
[ -n "${TENURED_BIN:-}" ] || cargo build --profile "$profile" -p tenure-node --bin tenured
cargo build --profile "$profile" -p tenure-jepsen --features etcd --bin tenure-jepsen
exec "target/$dir/tenure-jepsen" bench "$@"
