#!/usr/bin/env bash
# A private PostgreSQL primary with a hot standby (streaming replication), made with the
# server's own tools (initdb, pg_ctl, pg_basebackup -R) on loopback ports, in its own
# state dir: the shared cluster on 5432 is never touched.
# Usage: pg-standby.sh start|stop|status
# Idempotent: start leaves running servers alone; stop stops only this state dir's
# servers. Every wait is bounded (30 s). Prints the URLs (trust auth on loopback).
# Env: PG_PRIMARY_PORT (5433), PG_STANDBY_PORT (5434), PG_BIN (/usr/lib/postgresql/15/bin),
#      TOPOLOGY_DIR (/tmp/counterlab-topologies/pg-standby).
set -euo pipefail
P=${PG_PRIMARY_PORT:-5433}
S=${PG_STANDBY_PORT:-5434}
BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
DIR=${TOPOLOGY_DIR:-/tmp/counterlab-topologies/pg-standby}
DB=test

# PostgreSQL refuses to run as root: run its tools as the postgres account then.
as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

sql() { as_pg "$BIN/psql" -X -qAt -h 127.0.0.1 -p "$1" -U postgres -d "${3:-postgres}" -c "$2"; }
ready() { as_pg "$BIN/pg_isready" -q -h 127.0.0.1 -p "$1"; }
in_recovery() { [ "$(sql "$S" 'SELECT pg_is_in_recovery()' 2>/dev/null)" = t ]; }
streaming() { [ "$(sql "$P" "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'" 2>/dev/null)" -ge 1 ]; }
has_db() { [ "$(sql "$S" "SELECT 1 FROM pg_database WHERE datname = '$DB'" 2>/dev/null)" = 1 ]; }

wait_for() {
  local what=$1; shift
  for _ in $(seq 1 150); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "pg-standby: $what not ready after 30 s" >&2
  return 1
}

pg_start() {
  local data=$1 port=$2
  if ready "$port"; then echo "pg-standby: $port already up"; return 0; fi
  as_pg "$BIN/pg_ctl" -D "$data" -l "$data/server.log" -w -t 30 -o "-p $port -k $DIR" start >/dev/null 9>&-
}

init_primary() {
  [ -f "$DIR/primary/PG_VERSION" ] && return 0
  as_pg "$BIN/initdb" -D "$DIR/primary" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
  cat >>"$DIR/primary/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
wal_level = replica
max_wal_senders = 10
hot_standby = on
hot_standby_feedback = on
max_standby_streaming_delay = 5s
fsync = off
max_connections = 200
shared_buffers = 64MB
CONF
  echo "host replication all 127.0.0.1/32 trust" >>"$DIR/primary/pg_hba.conf"
}

init_standby() {
  [ -f "$DIR/standby/PG_VERSION" ] && return 0
  as_pg "$BIN/pg_basebackup" -h 127.0.0.1 -p "$P" -U postgres -D "$DIR/standby" -R -X stream -c fast
}

urls() {
  echo "COUNTERLAB_POSTGRES_URL=postgres://postgres@127.0.0.1:$P/$DB"
  echo "COUNTERLAB_POSTGRES_REPLICA_URL=postgres://postgres@127.0.0.1:$S/$DB"
}

# One start/stop/status at a time: tests may start the same topology at once (bounded wait).
# The servers it starts get the lock's fd closed (9>&-): a daemon holding it would block
# every later start and stop.
exec 9>"${TMPDIR:-/tmp}/counterlab-topology-pg-standby.lock"
flock -w 120 9 || { echo "pg-standby: another start/stop still holds the lock after 120 s" >&2; exit 1; }

case "${1:-}" in
  start)
    mkdir -p "$DIR"
    [ "$(id -u)" = 0 ] && chown postgres: "$DIR"
    init_primary
    pg_start "$DIR/primary" "$P"
    [ "$(sql "$P" "SELECT 1 FROM pg_database WHERE datname = '$DB'")" = 1 ] || sql "$P" "CREATE DATABASE $DB"
    init_standby
    pg_start "$DIR/standby" "$S"
    wait_for "standby in recovery" in_recovery
    wait_for "streaming replication" streaming
    wait_for "database $DB on the standby" has_db
    urls
    ;;
  stop)
    for d in standby primary; do
      if [ -f "$DIR/$d/postmaster.pid" ]; then as_pg "$BIN/pg_ctl" -D "$DIR/$d" -m fast -w -t 30 stop >/dev/null || true; fi
    done
    echo "pg-standby: stopped"
    ;;
  status)
    if ready "$P" && ready "$S" && in_recovery && streaming; then urls; else echo "pg-standby: not running" >&2; exit 1; fi
    ;;
  destroy)
    "$0" stop
    rm -rf "$DIR"
    echo "pg-standby: removed $DIR"
    ;;
  *) echo "usage: $0 start|stop|status|destroy" >&2; exit 2 ;;
esac
