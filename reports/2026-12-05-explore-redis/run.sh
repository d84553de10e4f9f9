#!/usr/bin/env bash
# Reference runs of `counterlab explore` over the Redis designs and the Redis bug-zoo
# mutants (issue 33): scenarios/explore-redis.toml on PostgreSQL at read committed, one
# run per design (16 op pairs, budget 1000 schedules a pair, no preemption bound, 2
# sessions; a buffered design's flush as a third session with the flusher's crash armed).
# Each run's explore.json, explore.md and replay files go to a folder of its own here; its
# wall time and the load average before and after it to times.txt. From the repository
# root: `cargo build && bash reports/2026-12-05-explore-redis/run.sh [design...]`; the
# broker designs (a consumer session, its crash armed) with `... run.sh --broker`.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${COUNTERLAB_BIN:-target/debug/counterlab}
here=reports/2026-12-05-explore-redis
scenario=scenarios/explore-redis.toml
designs=("$@")
if [ "${1:-}" = --broker ]; then
  scenario=scenarios/zoo/redelivered-twice.toml
  designs=(mq-consumer mq-consumer-idempotent)
elif [ ${#designs[@]} -eq 0 ]; then
  designs=(lua-script watch-multi redis-set redis-hash zset-buffer-durable
    watch-multi-unwatched redis-hash-read-then-set redis-set-check-then-remove zset-buffer zset-buffer-replay
    redis-counter cache-aside cache-aside-delete-first zset-replica-reads zset-replica-reads-no-reconcile)
fi
for name in "${designs[@]}"; do
  load0=$(cut -d' ' -f1-3 /proc/loadavg)
  t0=$(date +%s.%N)
  "$bin" explore "$scenario" --backend postgres --isolation read-committed --strategy "$name" --out "$here/$name" > "$here/$name.txt" 2> "$here/$name.log"
  code=$?
  t1=$(date +%s.%N)
  load1=$(cut -d' ' -f1-3 /proc/loadavg)
  printf '%s\texit %s\t%.1f s\tload before %s\tload after %s\n' "$name" "$code" "$(echo "$t1 - $t0" | bc)" "$load0" "$load1" >> "$here/times.txt"
done
