#!/usr/bin/env bash
# Runs the web console's browser test: headless Chromium (Debian's, /usr/bin/chromium) driven
# by Playwright against a live three-node cluster with auth on, gRPC on 127.0.0.1:7321-7323 and
# the console on http://127.0.0.1:8321-8323, started by tests/live-cluster.sh from the
# already-built target/debug/tenured and tenure (cargo build --bin tenured --bin tenure).
# Installs playwright-core from package-lock.json (npm ci); the screenshots go to
# target/console-shots (or CONSOLE_SHOTS); the nodes are always stopped and their data removed.
#
#   tests/browser/run.sh [NODE_TEST_ARGS...]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

command -v node >/dev/null 2>&1 || { echo "Node.js is not installed (apt-get install nodejs npm)" >&2; exit 1; }
export CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
[ -x "$CHROMIUM" ] || { echo "no $CHROMIUM: apt-get install chromium" >&2; exit 1; }
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)

export CONSOLE_SHOTS="${CONSOLE_SHOTS:-${CARGO_TARGET_DIR:-$root/target}/console-shots}"
LIVE_PORTS="7321 7322 7323" LIVE_HTTP_PORTS="8321 8322 8323" LIVE_AUTH=1
. "$root/tests/live-cluster.sh"
export TENURE_CLI="$live_bin/tenure"

cd "$here"
live_run node --test --test-timeout=120000 "$@" console.test.js
echo "screenshots in $CONSOLE_SHOTS"
