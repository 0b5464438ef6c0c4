#!/usr/bin/env bash
# Runs the Node.js client's tests against a live three-node cluster with auth on, on
# 127.0.0.1:7311-7313, started by tests/live-cluster.sh from the already-built
# target/debug/tenured and tenure (cargo build --bin tenured --bin tenure). Installs the
# package's dependencies from package-lock.json (npm ci) and starts a PostgreSQL server for
# the fencing guard's test (guard/pg-server.sh); the nodes and the server are always stopped
# and their data removed on exit.
#
#   client/node/run-live-test.sh [NODE_TEST_ARGS...]
#   TENURE_NODE_PORTS="7411 7412 7413" client/node/run-live-test.sh   (other ports)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

command -v node >/dev/null 2>&1 || { echo "Node.js is not installed (apt-get install nodejs npm)" >&2; exit 1; }
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)

LIVE_PORTS="${TENURE_NODE_PORTS:-7311 7312 7313}" LIVE_AUTH=1 LIVE_HTTP_PORTS="" LIVE_POSTGRES=1
. "$root/tests/live-cluster.sh"

cd "$here"
live_run node --test --test-timeout=60000 "$@" test/live.test.js test/guard.test.js test/fence-http.test.js
