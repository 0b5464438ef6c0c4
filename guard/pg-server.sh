#!/usr/bin/env bash
# A throwaway PostgreSQL server for the guards' tests (Rust, Python, Node.js): a cluster of its
# own in DIR, listening only on a Unix socket in DIR, superuser `tenure`, trust auth, no fsync
# (a test server: what it holds dies with DIR).
#
#   guard/pg-server.sh start DIR    prints the libpq connection string, `host=DIR user=tenure
#                                   dbname=postgres`, once the server accepts connections
#   guard/pg-server.sh stop DIR     stops it (immediately); removing DIR is the caller's
#
# Debian's `postgresql` package provides the server (`.ci/run` installs it); without it the
# script exits 2. PostgreSQL refuses to run as root: run as root, the script runs the server
# as the package's `postgres` user and hands DIR to it. The socket's path, DIR/.s.PGSQL.5432,
# must fit in 107 bytes: keep DIR short (/tmp/…).
set -euo pipefail
usage="usage: guard/pg-server.sh start|stop DIR"
cmd=${1:?$usage}
dir=${2:?$usage}
initdb=$(command -v initdb 2>/dev/null || ls -d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -1 || true)
[ -n "$initdb" ] && [ -x "$initdb" ] || { echo "no PostgreSQL server here: install Debian's postgresql" >&2; exit 2; }
bin=$(dirname "$(realpath "$initdb")")
as_owner() { # from /, which the server's user can enter whatever the caller's directory
  if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}
case $cmd in
  start)
    mkdir -p "$dir"
    dir=$(realpath "$dir")
    [ "$(id -u)" != 0 ] || chown postgres: "$dir"
    as_owner "$bin/initdb" -D "$dir/data" -U tenure --auth=trust --no-sync -E UTF8 \
      --locale=C >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
    if ! as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -o "-c listen_addresses='' \
      -k '$dir' -c fsync=off -c shared_buffers=16MB -c max_connections=64" start >/dev/null; then
      cat "$dir/server.log" >&2
      as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
      exit 1
    fi
    echo "host=$dir user=tenure dbname=postgres"
    ;;
  stop)
    dir=$(realpath "$dir")
    as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null
    ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
