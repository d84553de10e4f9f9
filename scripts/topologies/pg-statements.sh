#!/usr/bin/env bash
# A private PostgreSQL with pg_stat_statements loaded (shared_preload_libraries) and created
# in its database `test`, made with the server's own tools (initdb, pg_ctl) on a loopback
# port in its own state dir: the shared cluster on 5432 is never reconfigured.
# Usage: pg-statements.sh start|stop|status|destroy
# Idempotent: start leaves a running server alone; stop stops only this state dir's
# server. Every wait is bounded (30 s). Prints the URL (trust auth on loopback).
# Env: PG_STATEMENTS_PORT (5435), PG_BIN (/usr/lib/postgresql/15/bin),
#      TOPOLOGY_DIR (/tmp/counterlab-topologies/pg-statements).
set -euo pipefail
P=${PG_STATEMENTS_PORT:-5435}
BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
DIR=${TOPOLOGY_DIR:-/tmp/counterlab-topologies/pg-statements}
DB=test

# PostgreSQL refuses to run as root: run its tools as the postgres account then.
as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

sql() { as_pg "$BIN/psql" -X -qAt -h 127.0.0.1 -p "$P" -U postgres -d "${2:-postgres}" -c "$1"; }
ready() { as_pg "$BIN/pg_isready" -q -h 127.0.0.1 -p "$P"; }
url() { echo "COUNTERLAB_POSTGRES_URL=postgres://postgres@127.0.0.1:$P/$DB"; }

# One start/stop/status at a time: tests may start it at once (bounded wait). The server
# gets the lock's fd closed (9>&-).
exec 9>"${TMPDIR:-/tmp}/counterlab-topology-pg-statements.lock"
flock -w 120 9 || { echo "pg-statements: another start/stop still holds the lock after 120 s" >&2; exit 1; }

case "${1:-}" in
  start)
    mkdir -p "$DIR"
    [ "$(id -u)" = 0 ] && chown postgres: "$DIR"
    if [ ! -f "$DIR/data/PG_VERSION" ]; then
      as_pg "$BIN/initdb" -D "$DIR/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
      cat >>"$DIR/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = top
fsync = off
max_connections = 100
shared_buffers = 32MB
CONF
    fi
    if ! ready; then
      as_pg "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/data/server.log" -w -t 30 -o "-p $P -k $DIR" start >/dev/null 9>&-
    fi
    [ "$(sql "SELECT 1 FROM pg_database WHERE datname = '$DB'")" = 1 ] || sql "CREATE DATABASE $DB"
    sql "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" "$DB"
    url
    ;;
  stop)
    if [ -f "$DIR/data/postmaster.pid" ]; then as_pg "$BIN/pg_ctl" -D "$DIR/data" -m fast -w -t 30 stop >/dev/null || true; fi
    echo "pg-statements: stopped"
    ;;
  status)
    if ready; then url; else echo "pg-statements: not running" >&2; exit 1; fi
    ;;
  destroy)
    "$0" stop
    rm -rf "$DIR"
    echo "pg-statements: removed $DIR"
    ;;
  *) echo "usage: $0 start|stop|status|destroy" >&2; exit 2 ;;
esac
