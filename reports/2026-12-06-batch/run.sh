#!/usr/bin/env bash
# Issue 37's figures of 2026-12-06, one after the other on a quiet machine:
#   redis   counterlab / redis-benchmark on GET, INCR, ZINCRBY, EVALSHA at -c 16 (depth 1)
#           and batched (`redis_batch = 16`, 16 workers) against -P 16 -c 16
#           (benches/redis/parity.py OUT ROUNDS pairs,batched);
#   rss     peak RSS of the 1M users / 10M rows SQLite run at 16 workers, alternating
#           glibc's default arenas and MALLOC_ARENA_MAX=2, ROUNDS times each;
#   pg      counterlab / pgbench at 1, 16 and 64 clients (benches/pgbench/round_trips.py).
# Usage: reports/2026-12-06-batch/run.sh OUT [STEPS] [ROUNDS]
# (a release build at ./target/release/counterlab; STEPS a subset of "redis,rss,pg").
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?OUT}
STEPS=${2:-redis,rss}
ROUNDS=${3:-3}
CL=./target/release/counterlab
mkdir -p "$OUT"
step() { [[ ",$STEPS," == *",$1,"* ]]; }
stamp() { echo "$(date -u +%H:%M:%S) $* (load $(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$OUT/steps.log"; }
rss() { awk -F': ' '/Maximum resident set size/ {printf "%.1f", $2/1024}' "$1"; }
if step redis; then
  stamp "redis: begin"
  python3 benches/redis/parity.py "$OUT/redis" "$ROUNDS" pairs,batched > "$OUT/redis.log" 2>&1
  stamp "redis: exit $?"
fi
if step rss; then
  stamp "rss: begin"
  mkdir -p "$OUT/rss"
  for r in $(seq 1 "$ROUNDS"); do
    for arenas in default 2; do
      t="$OUT/rss/10m-sqlite-$arenas-$r"
      if [ "$arenas" = default ]; then env=(); else env=(MALLOC_ARENA_MAX=$arenas); fi
      env "${env[@]}" /usr/bin/time -v -o "$t.time" $CL run reports/2026-12-02-memory-and-check/memory-1m.toml \
        --backend sqlite --workers 16 -q --out "$t" > "$t.log" 2>&1
      echo "round $r arenas $arenas: exit $? peak RSS $(rss "$t.time") MB (load $(cut -d' ' -f1 /proc/loadavg))" | tee -a "$OUT/rss/rss.log"
    done
  done
  stamp "rss: end"
fi
if step pg; then
  stamp "pg: begin"
  PARITY_SECS=${PARITY_SECS:-8} PARITY_1T_AT= python3 benches/pgbench/round_trips.py "$OUT/pg" 5 parity > "$OUT/pg.log" 2>&1
  stamp "pg: exit $?"
  python3 benches/pgbench/parity.py "$OUT/pg/raw.log" > "$OUT/pg/parity.md"
fi
find "$OUT" -name report.html -delete
stamp "done"
