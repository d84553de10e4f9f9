#!/usr/bin/env bash
# A local Redis Cluster of 3 primaries and 3 replicas from this machine's redis-server,
# on loopback ports: `start` (idempotent: a healthy cluster is left as it is), `stop`
# (shuts the nodes down and removes their state), `status`. Prints the URL to use.
#
#   scripts/topologies/redis-cluster.sh start|stop|status
#   REDIS_CLUSTER_PORT=7100 REDIS_CLUSTER_DIR=/tmp/x scripts/topologies/redis-cluster.sh start
#
# Ports PORT..PORT+5 (default 7000..7005); each node's cluster bus is port+10000.
# State (nodes.conf, logs, pid files) lives under REDIS_CLUSTER_DIR (default
# ${TMPDIR:-/tmp}/counterlab-redis-cluster-PORT). Every wait is bounded.
set -euo pipefail

base=${REDIS_CLUSTER_PORT:-7000}
host=127.0.0.1
dir=${REDIS_CLUSTER_DIR:-${TMPDIR:-/tmp}/counterlab-redis-cluster-$base}
ports=()
for i in 0 1 2 3 4 5; do ports+=($((base + i))); done

cli() { redis-cli -h "$host" -p "$1" "${@:2}"; }
up() { [ "$(cli "$1" ping 2>/dev/null)" = PONG ]; }
state_ok() { cli "$1" cluster info 2>/dev/null | tr -d '\r' | grep -qx 'cluster_state:ok'; }
# Known nodes as node $1 sees them (6 once the cluster is joined).
known() { cli "$1" cluster info 2>/dev/null | tr -d '\r' | sed -n 's/^cluster_known_nodes://p'; }
url() {
  local list=""
  for p in "${ports[@]}"; do list+="${list:+,}$host:$p"; done
  echo "redis+cluster://$list"
}

# wait_until SECONDS WHAT CHECK...: polls CHECK every 0.2 s, gives up after SECONDS.
wait_until() {
  local secs=$1 what=$2; shift 2
  local n=$((secs * 5))
  for _ in $(seq 1 "$n"); do
    "$@" && return 0
    sleep 0.2
  done
  echo "redis-cluster: $what within ${secs} s: no" >&2
  return 1
}

# A replica is ready once its link to its primary is up (its first copy loaded).
synced() {
  local info
  info=$(cli "$1" info replication 2>/dev/null | tr -d '\r')
  grep -qx 'role:master' <<<"$info" || grep -qx 'master_link_status:up' <<<"$info"
}

all_ok() {
  for p in "${ports[@]}"; do
    state_ok "$p" || return 1
    [ "$(known "$p")" = 6 ] || return 1
    synced "$p" || return 1
  done
}

healthy() { for p in "${ports[@]}"; do up "$p" || return 1; done; all_ok; }

start() {
  command -v redis-server >/dev/null || { echo "redis-cluster: redis-server not found" >&2; exit 1; }
  if healthy; then
    echo "redis-cluster: already up on ${ports[0]}..${ports[5]}"
    url
    return 0
  fi
  mkdir -p "$dir"
  for p in "${ports[@]}"; do
    if up "$p"; then continue; fi
    mkdir -p "$dir/$p"
    redis-server --port "$p" --bind "$host" --cluster-enabled yes \
      --cluster-config-file "$dir/$p/nodes.conf" --cluster-node-timeout 2000 \
      --dir "$dir/$p" --save "" --appendonly no --daemonize yes --repl-diskless-sync-delay 0 \
      --pidfile "$dir/$p/redis.pid" --logfile "$dir/$p/redis.log" >/dev/null 9>&-
  done
  for p in "${ports[@]}"; do wait_until 10 "node $p answering" up "$p"; done
  # A fresh set of nodes (each knows only itself, no slots) is joined; nodes that
  # remember a cluster from their nodes.conf only need to agree again.
  if [ "$(known "${ports[0]}")" = 1 ] && ! state_ok "${ports[0]}"; then
    local addrs=()
    for p in "${ports[@]}"; do addrs+=("$host:$p"); done
    redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$dir/create.log" 2>&1 \
      || { cat "$dir/create.log" >&2; exit 1; }
  fi
  wait_until 30 "cluster_state:ok and replicas in sync on every node" all_ok
  echo "redis-cluster: up on ${ports[0]}..${ports[5]} (state in $dir)"
  url
}

stop() {
  for p in "${ports[@]}"; do
    if up "$p"; then cli "$p" shutdown nosave >/dev/null 2>&1 || true; fi
  done
  for p in "${ports[@]}"; do
    wait_until 10 "node $p stopped" bash -c "! redis-cli -h $host -p $p ping >/dev/null 2>&1"
  done
  rm -rf "$dir"
  echo "redis-cluster: stopped ${ports[0]}..${ports[5]}"
}

status() {
  local rc=0
  for p in "${ports[@]}"; do
    if up "$p"; then
      local role
      role=$(cli "$p" role 2>/dev/null | head -n 1)
      echo "$host:$p $role $(cli "$p" cluster info 2>/dev/null | tr -d '\r' | grep '^cluster_state:')"
    else
      echo "$host:$p down"
      rc=1
    fi
  done
  url
  return $rc
}

# One start/stop/status at a time: tests may start the same topology at once (bounded wait).
# The servers it starts get the lock's fd closed (9>&-): a daemon holding it would block
# every later start and stop.
exec 9>"${TMPDIR:-/tmp}/counterlab-topology-redis-cluster.lock"
flock -w 120 9 || { echo "redis-cluster: another start/stop still holds the lock after 120 s" >&2; exit 1; }

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
