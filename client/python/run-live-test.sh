#!/usr/bin/env bash
# Runs the Python client's tests against a live three-node cluster on 127.0.0.1:7301-7303,
# started by tests/live-cluster.sh from the already-built target/debug/tenured and tenure
# (cargo build --bin tenured --bin tenure).
# Makes client/python/.venv, installs the package with pytest, grpcio-tools and psycopg,
# generates the stubs from proto/; starts a PostgreSQL server for the guard's tests
# (guard/pg-server.sh); the nodes and the server are always stopped and their data removed on
# exit.
#
#   client/python/run-live-test.sh [PYTEST_ARGS...]
#   TENURE_PY_PORTS="7401 7402 7403" client/python/run-live-test.sh   (other ports)
#   TENURE_PY_KEEP=1 ...   keeps the data dir and node logs
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
read -r -a ports <<<"${TENURE_PY_PORTS:-7301 7302 7303}"

command -v python3 >/dev/null 2>&1 || { echo "python3 is not installed (apt-get install python3 python3-venv)" >&2; exit 1; }

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

# The cluster (the Python client's tests do not use auth), and a PostgreSQL server for the
# fencing guard's tests.
LIVE_PORTS="${ports[*]}" LIVE_KEEP="${TENURE_PY_KEEP:-}" LIVE_AUTH="" LIVE_HTTP_PORTS=""
LIVE_POSTGRES=1
. "$root/tests/live-cluster.sh"

cd "$here"
live_run "$py" -m pytest -p no:cacheprovider -ra "$@" tests
