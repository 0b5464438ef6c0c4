#!/usr/bin/env bash
# Builds tenured and tenure, starts a three-node Tenure cluster on 127.0.0.1:7101-7103 (gRPC)
# and 127.0.0.1:8101-8103 (the HTTP/JSON gateway, loopback only), prints the endpoints and a
# sample command, and stops all three nodes on Ctrl-C.
#
#   deploy/local-cluster.sh [DATA_DIR]     (default: a fresh temporary directory)
#   TENURE_PROFILE=debug deploy/local-cluster.sh   (faster build, slower nodes)
set -euo pipefail
cd "$(dirname "$0")/.."

profile=${TENURE_PROFILE:-release}
if [ "$profile" = release ]; then
  cargo build --release --bin tenured --bin tenure
else
  cargo build --bin tenured --bin tenure
fi
bin="$PWD/target/$profile"
data=${1:-$(mktemp -d -t tenure-local.XXXXXX)}
mkdir -p "$data"
peers="1=127.0.0.1:7101,2=127.0.0.1:7102,3=127.0.0.1:7103"

for port in 7101 7102 7103 8101 8102 8103; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "port $port is already in use: is another local cluster running?" >&2
    exit 1
  fi
done

pids=()
stop() {
  trap - INT TERM EXIT
  echo
  echo "stopping nodes ${pids[*]}"
  kill "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  echo "data kept in $data"
}
trap stop INT TERM EXIT

for id in 1 2 3; do
  "$bin/tenured" --id "$id" --listen "127.0.0.1:710$id" --data-dir "$data/node$id" --peers "$peers" \
    --http-listen "127.0.0.1:810$id" >"$data/node$id.log" 2>&1 &
  pids+=("$!")
done

export TENURE_ENDPOINTS="127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103"
for _ in $(seq 1 100); do
  if "$bin/tenure" --timeout 1s cluster status 2>/dev/null | grep -q "Leader"; then
    break
  fi
  sleep 0.2
done

cat <<MSG

Tenure is running: three nodes, data and logs under $data
  endpoints  $TENURE_ENDPOINTS   (the tenure CLI uses these by default)
  HTTP       http://127.0.0.1:8101/v1/  (and 8102, 8103; the routes: /v1/openapi.json)
  console    http://127.0.0.1:8101/     (a browser: who holds what, live; auth is off here)
  cli        $bin/tenure
  node 1     127.0.0.1:7101  pid ${pids[0]}  log $data/node1.log
  node 2     127.0.0.1:7102  pid ${pids[1]}  log $data/node2.log
  node 3     127.0.0.1:7103  pid ${pids[2]}  log $data/node3.log
  (\`tenure cluster status\` says which id leads: kill -9 that pid to see a failover)

Try:
  $bin/tenure acquire world/eu-1 --holder server-7 --ttl 30s
  $bin/tenure status world/eu-1
  $bin/tenure cluster status
  curl -s -X POST http://127.0.0.1:8101/v1/resources/world%2Feu-2:acquire -H 'content-type: application/json' -d '{"holder": "server-8", "ttl": "30s"}'
  curl -s http://127.0.0.1:8101/v1/resources/world%2Feu-2

Ctrl-C stops all three nodes.
MSG
"$bin/tenure" cluster status || true
wait
