#!/usr/bin/env bash
# The private PostgreSQL 15 instance these figures were measured on: loopback port 5441,
# trust auth, synchronous_commit = off (a commit does not wait for its WAL flush, so the
# disk is out of every op's path), autovacuum off and no TLS. The shared server on 5432
# is not touched. Usage: pg-async.sh start|stop
set -euo pipefail
D=${LAGPG_DIR:-/tmp/lagpg}
BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
case ${1:-} in
start)
  if [ ! -f "$D/data/PG_VERSION" ]; then
    mkdir -p "$D" && { [ "$(id -u)" != 0 ] || chown postgres "$D"; }
    as_pg "$BIN/initdb" -D "$D/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
    printf '%s\n' "listen_addresses = '127.0.0.1'" "synchronous_commit = off" "autovacuum = off" \
      "max_connections = 100" "shared_buffers = 128MB" "ssl = off" >>"$D/data/postgresql.conf"
  fi
  as_pg "$BIN/pg_ctl" -D "$D/data" -l "$D/server.log" -w -t 30 -o "-p 5441 -k $D" start
  psql -h 127.0.0.1 -p 5441 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1 \
    || psql -h 127.0.0.1 -p 5441 -U postgres -c "CREATE DATABASE test"
  echo "COUNTERLAB_POSTGRES_URL=postgres://postgres@127.0.0.1:5441/test" ;;
stop) as_pg "$BIN/pg_ctl" -D "$D/data" -w -t 30 stop ;;
*) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
