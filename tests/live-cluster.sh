# Sourced (not run) by the live tests of the clients and of the web console: starts a
# three-node cluster of the already-built target/debug/tenured on loopback, waits until it has
# a leader, and on exit stops the nodes and removes their data (printing the tail of each log
# when the test failed).
#
#   LIVE_PORTS="7301 7302 7303"       gRPC ports (required)
#   LIVE_HTTP_PORTS="8301 8302 8303"  HTTP gateway ports (optional: no gateway without)
#   LIVE_AUTH=1                       auth on: a token file with the tokens below
#   LIVE_KEEP=1                       keep the data and the logs
#   LIVE_POSTGRES=1                   also a throwaway PostgreSQL server (guard/pg-server.sh)
#   . tests/live-cluster.sh
#
# Sets TENURE_ENDPOINTS; LIVE_HTTP (the gateways' base URLs, comma-separated); with LIVE_AUTH,
# TENURE_TOKEN (an admin token, which the tenure CLI takes from it), LIVE_ADMIN_TOKEN and
# LIVE_CLIENT_TOKEN (principal `alice`, role client); with LIVE_POSTGRES, TENURE_TEST_PG (its
# libpq connection string); LIVE_PIDS and LIVE_DATA. Run the test
# itself with `live_run COMMAND…`: in the background, so that Ctrl-C or a TERM stops it and the
# nodes at once.

live_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The caller's own settings for the CLI do not apply to this cluster.
unset TENURE_CA_CERT TENURE_TOKEN
live_bin="${CARGO_TARGET_DIR:-$live_root/target}/debug"
read -r -a live_ports <<<"${LIVE_PORTS:?LIVE_PORTS names three gRPC ports}"
read -r -a live_http_ports <<<"${LIVE_HTTP_PORTS:-}"

for tool in tenured tenure; do
  [ -x "$live_bin/$tool" ] || { echo "no $live_bin/$tool: run 'cargo build --bin tenured --bin tenure' first" >&2; exit 1; }
done
for port in "${live_ports[@]}" "${live_http_ports[@]}"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "port $port is already in use: pick others (LIVE_PORTS, LIVE_HTTP_PORTS)" >&2
    exit 1
  fi
done

LIVE_DATA="$(mktemp -d -t tenure-live.XXXXXX)"
LIVE_PIDS=()
LIVE_CHILDREN=()
live_stop() {
  local status=$1
  trap - INT TERM EXIT
  trap '' PIPE # a closed stdout (| head) must not stop the cleanup
  local pids=("${LIVE_CHILDREN[@]}" "${LIVE_PIDS[@]}")
  if [ "${#pids[@]}" -gt 0 ]; then
    kill "${pids[@]}" 2>/dev/null || true
    # 10 s to stop, then killed.
    for _ in $(seq 1 100); do
      local alive=0 pid
      for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
      [ "$alive" -eq 1 ] || break
      sleep 0.1
    done
    kill -9 "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
  fi
  if [ "$status" -ne 0 ]; then
    for log in "$LIVE_DATA"/node*.log; do
      [ -f "$log" ] && { echo "--- tail of $log"; tail -n 20 "$log"; } >&2
    done
  fi
  if [ -n "${LIVE_PG:-}" ]; then
    "$live_root/guard/pg-server.sh" stop "$LIVE_PG" || true
    if [ "$status" -ne 0 ] && [ -f "$LIVE_PG/server.log" ]; then
      { echo "--- tail of $LIVE_PG/server.log"; tail -n 20 "$LIVE_PG/server.log"; } >&2
    fi
  fi
  if [ -n "${LIVE_KEEP:-}" ]; then
    echo "data and logs kept in $LIVE_DATA ${LIVE_PG:+and $LIVE_PG}"
  else
    rm -rf "$LIVE_DATA" ${LIVE_PG:+"$LIVE_PG"}
  fi
  exit "$status"
}
trap 'live_stop $?' EXIT
trap 'live_stop 130' INT
trap 'live_stop 143' TERM

# Runs the test in the background and waits for it: its exit status is the script's.
live_run() {
  "$@" &
  LIVE_CHILDREN+=("$!")
  wait "$!"
}

# The guards' PostgreSQL: a directory of its own (the server may run as another user, who
# cannot enter LIVE_DATA), stopped and removed with the nodes.
LIVE_PG=""
if [ -n "${LIVE_POSTGRES:-}" ]; then
  LIVE_PG="$(mktemp -d /tmp/tenure-pg.XXXXXX)"
  TENURE_TEST_PG="$("$live_root/guard/pg-server.sh" start "$LIVE_PG")"
  export TENURE_TEST_PG
fi

live_args=()
if [ -n "${LIVE_AUTH:-}" ]; then
  live_token() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
  LIVE_ADMIN_TOKEN="$(live_token)"
  LIVE_CLIENT_TOKEN="$(live_token)"
  (
    umask 077
    {
      echo "$(live_token) nodes peer"
      echo "$LIVE_ADMIN_TOKEN ops admin"
      echo "$LIVE_CLIENT_TOKEN alice client"
    } >"$LIVE_DATA/tokens"
  )
  live_args+=(--token-file "$LIVE_DATA/tokens")
  export LIVE_ADMIN_TOKEN LIVE_CLIENT_TOKEN
  export TENURE_TOKEN="$LIVE_ADMIN_TOKEN"
fi

live_peers="1=127.0.0.1:${live_ports[0]},2=127.0.0.1:${live_ports[1]},3=127.0.0.1:${live_ports[2]}"
LIVE_HTTP=""
for id in 1 2 3; do
  node_args=("${live_args[@]}")
  if [ "${#live_http_ports[@]}" -gt 0 ]; then
    node_args+=(--http-listen "127.0.0.1:${live_http_ports[$((id - 1))]}")
    LIVE_HTTP="${LIVE_HTTP:+$LIVE_HTTP,}http://127.0.0.1:${live_http_ports[$((id - 1))]}"
  fi
  "$live_bin/tenured" --id "$id" --listen "127.0.0.1:${live_ports[$((id - 1))]}" \
    --data-dir "$LIVE_DATA/node$id" --peers "$live_peers" "${node_args[@]}" \
    >"$LIVE_DATA/node$id.log" 2>&1 &
  LIVE_PIDS+=("$!")
done
export TENURE_ENDPOINTS="127.0.0.1:${live_ports[0]},127.0.0.1:${live_ports[1]},127.0.0.1:${live_ports[2]}"
export LIVE_HTTP

# A leader, within 30 s, as the CLI sees it.
live_deadline=$((SECONDS + 30))
until live_status="$("$live_bin/tenure" --timeout 1s cluster status 2>/dev/null)" &&
  grep -q "Leader" <<<"$live_status"; do
  if [ "$SECONDS" -ge "$live_deadline" ]; then
    echo "no leader after 30 s" >&2
    exit 1
  fi
  sleep 0.2
done
echo "cluster up: $TENURE_ENDPOINTS${LIVE_HTTP:+, HTTP $LIVE_HTTP}"
