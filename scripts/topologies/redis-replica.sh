#!/usr/bin/env bash
# A local Redis primary with one replica (and, with SENTINEL=1, a Sentinel watching
# them), from this machine's own redis-server / redis-sentinel, on loopback ports.
# Usage: redis-replica.sh start|stop|status
# Idempotent: start leaves running nodes alone, stop stops only the nodes it started
# (by the pid files in its state dir). Every wait is bounded (30 s). Prints the URLs.
# Env: REDIS_PRIMARY_PORT (6390), REDIS_REPLICA_PORT (6391), SENTINEL_PORT (26390),
#      SENTINEL (0|1), TOPOLOGY_DIR (/tmp/counterlab-topologies/redis-replica).
set -euo pipefail
P=${REDIS_PRIMARY_PORT:-6390}
R=${REDIS_REPLICA_PORT:-6391}
S=${SENTINEL_PORT:-26390}
DIR=${TOPOLOGY_DIR:-/tmp/counterlab-topologies/redis-replica}

cli() { redis-cli -h 127.0.0.1 -p "$1" "${@:2}"; }
up() { [ "$(cli "$1" ping 2>/dev/null)" = PONG ]; }

# wait_for WHAT CMD...: polls CMD every 0.2 s for up to 30 s.
wait_for() {
  local what=$1; shift
  for _ in $(seq 1 150); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "redis-replica: $what not ready after 30 s" >&2
  return 1
}

linked() { cli "$R" info replication | tr -d '\r' | grep -q '^master_link_status:up'; }

start_node() {
  local port=$1; shift
  if up "$port"; then echo "redis-replica: $port already up"; return 0; fi
  mkdir -p "$DIR/$port"
  redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
    --dir "$DIR/$port" --pidfile "$DIR/$port/redis.pid" --logfile "$DIR/$port/redis.log" "$@" 9>&-
  wait_for "redis $port" up "$port"
}

start_sentinel() {
  if up "$S"; then echo "redis-replica: sentinel $S already up"; return 0; fi
  command -v redis-sentinel >/dev/null || { echo "redis-replica: redis-sentinel not installed" >&2; return 1; }
  mkdir -p "$DIR/sentinel"
  cat >"$DIR/sentinel/sentinel.conf" <<CONF
port $S
bind 127.0.0.1
daemonize yes
pidfile $DIR/sentinel/sentinel.pid
logfile $DIR/sentinel/sentinel.log
dir $DIR/sentinel
sentinel monitor counterlab 127.0.0.1 $P 1
sentinel down-after-milliseconds counterlab 1000
sentinel failover-timeout counterlab 5000
CONF
  redis-sentinel "$DIR/sentinel/sentinel.conf" 9>&-
  wait_for "sentinel $S" up "$S"
}

urls() {
  echo "COUNTERLAB_REDIS_URL=redis://127.0.0.1:$P"
  echo "COUNTERLAB_REDIS_REPLICA_URL=redis://127.0.0.1:$R"
  if up "$S"; then echo "COUNTERLAB_REDIS_SENTINEL_URL=redis://127.0.0.1:$S (master name counterlab)"; fi
}

stop_pidfile() {
  local f=$1
  [ -f "$f" ] || return 0
  local pid; pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && { echo "redis-replica: pid $pid did not stop" >&2; return 1; }
  fi
  rm -f "$f"
}

# One start/stop/status at a time: tests may start the same topology at once (bounded wait).
# The servers it starts get the lock's fd closed (9>&-): a daemon holding it would block
# every later start and stop.
exec 9>"${TMPDIR:-/tmp}/counterlab-topology-redis-replica.lock"
flock -w 120 9 || { echo "redis-replica: another start/stop still holds the lock after 120 s" >&2; exit 1; }

case "${1:-}" in
  start)
    start_node "$P"
    start_node "$R" --replicaof 127.0.0.1 "$P"
    wait_for "replication link $P -> $R" linked
    if [ "${SENTINEL:-0}" = 1 ]; then start_sentinel; fi
    urls
    ;;
  stop)
    stop_pidfile "$DIR/sentinel/sentinel.pid"
    stop_pidfile "$DIR/$R/redis.pid"
    stop_pidfile "$DIR/$P/redis.pid"
    echo "redis-replica: stopped"
    ;;
  status)
    if up "$P" && up "$R" && linked; then urls; else echo "redis-replica: not running" >&2; exit 1; fi
    ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
