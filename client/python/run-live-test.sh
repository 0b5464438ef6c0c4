#!/usr/bin/env bash
# Runs the Python client's tests against a live three-node cluster on 127.0.0.1:7301-7303,
# started from the already-built target/debug/tenured (cargo build --bin tenured --bin tenure).
# Makes client/python/.venv, installs the package with pytest and grpcio-tools, generates the
# stubs from proto/, and always stops the nodes and removes their data on exit.
#
#   client/python/run-live-test.sh [PYTEST_ARGS...]
#   TENURE_PY_PORTS="7401 7402 7403" client/python/run-live-test.sh   (other ports)
#   TENURE_PY_KEEP=1 ...   keeps the data dir and node logs
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="${CARGO_TARGET_DIR:-$root/target}/debug"
read -r -a ports <<<"${TENURE_PY_PORTS:-7301 7302 7303}"

[ -x "$bin/tenured" ] || { echo "no $bin/tenured: run 'cargo build --bin tenured' first" >&2; exit 1; }
command -v python3 >/dev/null 2>&1 || { echo "python3 is not installed (apt-get install python3 python3-venv)" >&2; exit 1; }
for port in "${ports[@]}"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "port $port is already in use: pick others with TENURE_PY_PORTS=\"A B C\"" >&2
    exit 1
  fi
done

# The venv and the stubs.
venv="$here/.venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || {
    rm -rf "$venv"
    echo "python3 -m venv failed: the venv module or ensurepip is missing (apt-get install python3-venv)" >&2
    exit 1
  }
fi
py="$venv/bin/python"
pip_log="$(mktemp -t tenure-py-pip.XXXXXX)"
if ! "$py" -m pip install --disable-pip-version-check -e "$here[dev]" >"$pip_log" 2>&1; then
  cat "$pip_log" >&2
  rm -f "$pip_log"
  echo "pip install of client/python[dev] failed" >&2
  exit 1
fi
rm -f "$pip_log"
"$py" "$here/generate.py"

# The cluster.
data="$(mktemp -d -t tenure-py.XXXXXX)"
pids=()
stop() {
  local status=$?
  trap - INT TERM EXIT
  trap '' PIPE # a closed stdout (| head) must not stop the cleanup
  if [ "${#pids[@]}" -gt 0 ]; then
    kill "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
  fi
  if [ "$status" -ne 0 ]; then
    for log in "$data"/node*.log; do
      [ -f "$log" ] && { echo "--- tail of $log"; tail -n 20 "$log"; } >&2
    done
  fi
  if [ -n "${TENURE_PY_KEEP:-}" ]; then
    echo "data and logs kept in $data"
  else
    rm -rf "$data"
  fi
  exit "$status"
}
trap stop INT TERM EXIT

peers="1=127.0.0.1:${ports[0]},2=127.0.0.1:${ports[1]},3=127.0.0.1:${ports[2]}"
for id in 1 2 3; do
  "$bin/tenured" --id "$id" --listen "127.0.0.1:${ports[$((id - 1))]}" --data-dir "$data/node$id" \
    --peers "$peers" >"$data/node$id.log" 2>&1 &
  pids+=("$!")
done
export TENURE_ENDPOINTS="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}"

# Wait (up to 30 s) for a leader, through the Python client itself.
"$py" - <<'PY'
import os, sys, time
from tenure_client import Client, TenureError

deadline = time.monotonic() + 30
last: object = "no node knows a leader"
with Client(os.environ["TENURE_ENDPOINTS"], timeout=2.0) as client:
    while True:
        try:
            status = client.cluster_status()
            if status.leader_id:
                print(f"cluster up: leader {status.leader_id} ({status.leader_addr}), term {status.term}")
                break
        except TenureError as error:
            last = error
        if time.monotonic() > deadline:
            sys.exit(f"no leader after 30 s: {last}")
        time.sleep(0.2)
PY

cd "$here"
"$py" -m pytest -p no:cacheprovider -ra "$@" tests
