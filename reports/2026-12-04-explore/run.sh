#!/usr/bin/env bash
# Reference runs of `counterlab explore` (issue 33): the SQL designs and mutants of
# scenarios/explore.toml on every backend and level this machine has, and the Redis
# designs and mutants on PostgreSQL at read committed. Each run's explore.json,
# explore.md and replay files go to a folder of its own here; its wall time and the
# load average before it to times.txt. Run from the repository root on a quiet machine.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${COUNTERLAB_BIN:-target/debug/counterlab}
here=reports/2026-12-04-explore
: > "$here/times.txt"
run() {
  local name=$1; shift
  local load; load=$(cut -d' ' -f1 /proc/loadavg)
  local t0; t0=$(date +%s.%N)
  "$bin" explore "$@" --out "$here/$name" > "$here/$name.txt" 2> "$here/$name.log"
  local code=$?
  local t1; t1=$(date +%s.%N)
  printf '%s\texit %s\t%.1f s\tload %s\t%s\n' "$name" "$code" "$(echo "$t1 - $t0" | bc)" "$load" "$*" >> "$here/times.txt"
}
for level in read-committed repeatable-read serializable; do
  run "postgres-$level" scenarios/explore.toml --backend postgres --isolation "$level"
done
for level in read-committed repeatable-read; do
  run "mariadb-$level" scenarios/explore.toml --backend mysql --isolation "$level"
done
run sqlite scenarios/explore.toml --backend sqlite --isolation serializable
run redis-postgres-read-committed scenarios/zoo/correct-redis-designs.toml --backend postgres --isolation read-committed \
  --strategy redis-counter --strategy lua-script --strategy redis-hash --strategy redis-set --strategy watch-multi \
  --strategy watch-multi-unwatched --strategy redis-hash-read-then-set --strategy redis-set-check-then-remove \
  --strategy incr-first --strategy zset-buffer-durable
