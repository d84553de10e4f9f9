#!/usr/bin/env bash
# Issue 37's figures, one after the other on a quiet machine (nothing else compiling):
#   pg      counterlab / pgbench, same statements and the one-statement twin, at 1, 16 and
#           64 clients, alternating pairs, throughput and client CPU per op in the same
#           runs, plus the same counterlab run on one runtime thread at 16 clients
#           (benches/pgbench/round_trips.py parity; summary by benches/pgbench/parity.py);
#   redis   counterlab / redis-benchmark on GET, INCR, ZINCRBY, EVALSHA at -c 16 and
#           pipelined against -P 16 (benches/redis/parity.py), with the runtime's default
#           threads and again with TOKIO_WORKER_THREADS=1;
#   rss     peak RSS at 1, 64 and 256 workers and at 1M users / 10M rows (rss.sh).
# Usage: reports/2026-12-05-parity/run.sh OUT [STEPS] [PG_ROUNDS] [REDIS_ROUNDS]
# (a release build at ./target/release/counterlab; STEPS a subset of "pg,redis,redis1t,rss").
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?OUT}
STEPS=${2:-pg,redis,redis1t,rss}
PG_ROUNDS=${3:-5}
REDIS_ROUNDS=${4:-3}
mkdir -p "$OUT"
step() { [[ ",$STEPS," == *",$1,"* ]]; }
stamp() { echo "$(date -u +%H:%M:%S) $* (load $(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$OUT/steps.log"; }
if step pg; then
  stamp "pg: begin"
  PARITY_SECS=${PARITY_SECS:-8} python3 benches/pgbench/round_trips.py "$OUT/pg" "$PG_ROUNDS" parity > "$OUT/pg.log" 2>&1
  stamp "pg: exit $?"
  python3 benches/pgbench/parity.py "$OUT/pg/raw.log" > "$OUT/pg/parity.md"
fi
if step redis; then
  stamp "redis: begin"
  python3 benches/redis/parity.py "$OUT/redis" "$REDIS_ROUNDS" > "$OUT/redis.log" 2>&1
  stamp "redis: exit $?"
fi
if step redis1t; then
  stamp "redis1t: begin"
  TOKIO_WORKER_THREADS=1 python3 benches/redis/parity.py "$OUT/redis-1-thread" "$REDIS_ROUNDS" > "$OUT/redis1t.log" 2>&1
  stamp "redis1t: exit $?"
fi
if step rss; then
  stamp "rss: begin"
  bash reports/2026-12-05-parity/rss.sh "$OUT/rss" > "$OUT/rss.log" 2>&1
  stamp "rss: exit $?"
fi
find "$OUT" -name report.html -delete
stamp "done"
