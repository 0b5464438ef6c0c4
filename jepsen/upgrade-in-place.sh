#!/usr/bin/env bash
# An in-place rolling upgrade, checked: a three-node cluster of an older build writes state of
# every kind a node keeps on disk (history, exactly-once records, ended leases: released,
# expired and transferred; a live lease; some of it in a snapshot, the rest only in the log),
# then each node is stopped (SIGTERM) and started on the newer build over the same data
# directory, followers first, the leader last. Once the cluster runs the newer rules, and again
# after every node restarts on them (from a snapshot the new rules wrote, with a resource that
# went idle under them), the script reads the same things back and compares:
#
#   jepsen/upgrade-in-place.sh OLD_TENURED [NEW_TENURED]      (NEW defaults to target/release)
#
# What is read: each resource's history, retries of the first calls with their request ids
# (they must answer as the first calls did), Validate of every ended lease, the live lease.
# A grant after the upgrade must carry a higher fencing token than every one before it.
# Nodes listen on 127.0.0.1:7331-7333; data and logs go to OUT (default bench-runs/upgrade-*).
set -euo pipefail
cd "$(dirname "$0")/.."
old=$(realpath "${1:?usage: jepsen/upgrade-in-place.sh OLD_TENURED [NEW_TENURED]}")
new=$(realpath "${2:-target/release/tenured}")
cli=$(realpath "${TENURE_CLI:-target/release/tenure}")
out=${OUT:-bench-runs/upgrade-$(date +%s)}
[ ! -e "$out/node1" ] || { echo "$out already holds a run: give another OUT" >&2; exit 2; }
mkdir -p "$out"
out=$(realpath "$out")
peers="1=127.0.0.1:7331,2=127.0.0.1:7332,3=127.0.0.1:7333"
export TENURE_ENDPOINTS="127.0.0.1:7331,127.0.0.1:7332,127.0.0.1:7333"

declare -A pid
start() { # start ID BINARY
  "$2" --id "$1" --listen "127.0.0.1:733$1" --data-dir "$out/node$1" --peers "$peers" \
    >>"$out/node$1.log" 2>&1 &
  pid[$1]=$!
}
stop() { # stop ID: SIGTERM, and wait for the process to end
  kill -TERM "${pid[$1]}"
  wait "${pid[$1]}" || true
  unset "pid[$1]" # so that the cleanup never signals a pid the system has given out again
}
cleanup() {
  for id in "${!pid[@]}"; do kill -KILL "${pid[$id]}" 2>/dev/null || true; done
}
trap cleanup EXIT
t() { "$cli" --output json "$@"; }
# Every endpoint's row of `cluster status` as JSON (an unreachable one has no "state").
status_json() { "$cli" --output json --timeout 2s cluster status 2>/dev/null || true; }
wait_for() { # wait_for DESCRIPTION PYTHON-CONDITION-ON-rows
  for _ in $(seq 1 300); do
    if status_json | python3 -c "
import json, sys
try:
    rows = [r for r in json.load(sys.stdin) if 'state' in r]
except Exception:
    sys.exit(1)
sys.exit(0 if ($2) else 1)"; then
      return 0
    fi
    sleep 0.2
  done
  echo "timed out waiting until $1" >&2
  "$cli" cluster status >&2 || true
  exit 1
}
leader() {
  status_json | python3 -c "
import json, sys
print(next(r['id'] for r in json.load(sys.stdin) if r.get('state') == 'Leader'))"
}
# All three answer, one leads, and every node has applied the leader's commit index.
settled="len(rows) == 3 and sum(r['state'] == 'Leader' for r in rows) == 1 and len({r['applied_index'] for r in rows}) == 1"
field() { python3 -c "import json, sys; print(json.load(sys.stdin)$1)"; }

echo "old: $old ($("$old" --version)); new: $new ($("$new" --version)); data: $out"
for id in 1 2 3; do start "$id" "$old"; done
wait_for "a leader serves" "$settled"

# Before a snapshot: a released lease, an expired one, a transferred one.
released=$(t acquire up/released --holder a --ttl 10m --request-id acq-released | field "['lease']['fencing_token']")
t release up/released --holder a --token "$released" --request-id rel-released >/dev/null
t resources create up/expired --renewal-grace 1s >/dev/null
expired=$(t acquire up/expired --holder b --ttl 1s --request-id acq-expired | field "['lease']['fencing_token']")
t resources create up/transferred --transferable >/dev/null
moved=$(t acquire up/transferred --holder c --ttl 10m --request-id acq-transferred | field "['lease']['fencing_token']")
t transfer up/transferred --holder c --token "$moved" --to-holder d --request-id xfer >/dev/null
"$cli" cluster snapshot >/dev/null
# After it, only in the log: a live lease and a second released one.
live=$(t acquire up/live --holder e --ttl 1h --request-id acq-live | field "['lease']['fencing_token']")
again=$(t acquire up/released --holder f --ttl 10m --request-id acq-released-2 | field "['lease']['fencing_token']")
t release up/released --holder f --token "$again" --request-id rel-released-2 >/dev/null
# Let the 1 s lease run out and, after its 1 s of grace, the leader reclaim it.
for _ in $(seq 1 100); do
  t history up/expired | grep -qi reclaim && break
  sleep 0.2
done

read_back() { # read_back NAME: everything compared, one JSON document a line
  { # a "not valid" answer exits 1, and is one of the answers compared
    set +e
    for r in up/released up/expired up/transferred up/live; do
      t history "$r" --order asc --page-size 100
    done
    t acquire up/released --holder a --ttl 10m --request-id acq-released
    t release up/released --holder a --token "$released" --request-id rel-released
    t acquire up/released --holder f --ttl 10m --request-id acq-released-2
    t acquire up/live --holder e --ttl 1h --request-id acq-live
    t transfer up/transferred --holder c --token "$moved" --to-holder d --request-id xfer
    t validate up/released --token "$released"
    t validate up/released --token "$again"
    t validate up/expired --token "$expired"
    t validate up/transferred --token "$moved"
    t validate up/live --token "$live"
    t leases --holder e
  } 2>&1 | python3 -c "$normalise" >"$out/$1.json"
}
# The time a lease has left and the revision a read was served at move on; so does a lease's
# `expires_at` on the wall clock, by the time each leader change took (the lease clock stands
# still across one, spec §5.3). All else must not.
normalise='
import json, sys
def drop(v):
    if isinstance(v, dict):
        return {k: drop(x) for k, x in v.items() if k not in ("remaining_ms", "read_revision", "expires_at")}
    return [drop(x) for x in v] if isinstance(v, list) else v
for line in sys.stdin:
    try:
        print(json.dumps(drop(json.loads(line)), sort_keys=True))
    except ValueError:
        print(line, end="")'
read_back before

# The rolling upgrade: followers first, then the leader.
first=$(leader)
for id in $(printf '%s\n' 1 2 3 | grep -vx "$first") "$first"; do
  stop "$id"
  start "$id" "$new"
  wait_for "node $id serves on the new build and has caught up" "$settled"
  echo "node $id now runs $new"
done
wait_for "the cluster runs the new build's rules" "len({r['rules_version'] for r in rows}) == 1 and all(r['rules_version'] == int(r['rules_range'].split('-')[-1]) for r in rows)"
"$cli" cluster status
read_back upgraded

# Under the new rules: a resource that goes idle now (from rules version 4, into a slot of a
# chunk), then a snapshot on every node, so that the restart below starts from one written in
# the new rules' format.
newer=$(t acquire up/newer --holder h --ttl 10m --request-id acq-newer | field "['lease']['fencing_token']")
t release up/newer --holder h --token "$newer" --request-id rel-newer >/dev/null
read_newer() { # read_newer NAME: what the new rules wrote, compared across the restart
  {
    set +e
    t history up/newer --order asc --page-size 100
    t validate up/newer --token "$newer" # "not valid" exits 1: the group must not end on it
    t acquire up/newer --holder h --ttl 10m --request-id acq-newer
  } 2>&1 | python3 -c "$normalise" >"$out/$1.json"
}
read_newer newer-before
"$cli" cluster snapshot >/dev/null

# Every node restarted on the new build: each starts from what it kept in the new format.
for id in 1 2 3; do stop "$id"; done
for id in 1 2 3; do start "$id" "$new"; done
wait_for "the restarted cluster serves" "$settled"
read_back restarted
read_newer newer-restarted

# A grant after it all carries a higher fencing token than every grant before.
after=$(t acquire up/after --holder g --ttl 10m | field "['lease']['fencing_token']")
for token in "$released" "$expired" "$moved" "$live" "$again"; do
  [ "$after" -gt "$token" ] || { echo "FAIL: token $after after the upgrade is not above $token" >&2; exit 1; }
done

fail=0
for name in upgraded restarted; do
  if diff -u "$out/before.json" "$out/$name.json" >"$out/$name.diff"; then
    echo "$name: the same $(grep -c . "$out/before.json") lines of answers as before the upgrade"
  else
    echo "FAIL: $name answers differ from before the upgrade ($out/$name.diff):" >&2
    cat "$out/$name.diff" >&2
    fail=1
  fi
done
if diff -u "$out/newer-before.json" "$out/newer-restarted.json" >"$out/newer.diff"; then
  echo "newer: the same $(grep -c . "$out/newer-before.json") lines of answers after the restart"
else
  echo "FAIL: what the new rules wrote reads differently after the restart ($out/newer.diff):" >&2
  cat "$out/newer.diff" >&2
  fail=1
fi
du -sh "$out"/node{1,2,3} | sed 's/^/data: /'
[ "$fail" = 0 ] && echo "PASS: tokens after the upgrade from $after up; logs in $out"
exit "$fail"
