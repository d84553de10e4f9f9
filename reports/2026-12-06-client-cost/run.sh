#!/usr/bin/env bash
# Issue 37's figures of 2026-12-06 (second batch), one after the other on a quiet machine:
#   ab      the closed loop's runtime: current-thread against one worker (ab-runtime.sh);
#   redis   counterlab / redis-benchmark on GET, INCR, ZINCRBY, EVALSHA at -c 16 and
#           batched (`redis_batch = 16`) against -P 16 -c 16 (benches/redis/parity.py);
#   pg      counterlab / pgbench at 1, 16 and 64 clients, 5 alternating pairs of 8 s, and
#           right after each 64-client pair the same run on 2 worker threads
#           (benches/pgbench/round_trips.py, PARITY_1T_AT=64 PARITY_VARIANT_THREADS=2);
#   bound   the one-thread bound (`ONE_THREAD_MAX_WORKERS`, 32 when recheck/ ran, now 16):
#           at 32 clients, 3 pairs on one thread (`--threads 1`), each followed by the
#           same run on 2 worker threads (not run by default).
# Usage: reports/2026-12-06-client-cost/run.sh OUT [STEPS]   (a release build at
# ./target/release/counterlab; STEPS a subset of "ab,redis,pg,bound").
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?OUT}
STEPS=${2:-ab,redis,pg}
mkdir -p "$OUT"
step() { [[ ",$STEPS," == *",$1,"* ]]; }
stamp() { echo "$(date -u +%H:%M:%S) $* (load $(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$OUT/steps.log"; }
if step ab; then
  stamp "ab: begin"
  reports/2026-12-06-client-cost/ab-runtime.sh "$OUT/ab" 4 > "$OUT/ab.log" 2>&1
  stamp "ab: exit $?"
fi
if step redis; then
  stamp "redis: begin"
  python3 benches/redis/parity.py "$OUT/redis" 3 pairs,batched > "$OUT/redis.log" 2>&1
  stamp "redis: exit $?"
fi
if step pg; then
  stamp "pg: begin"
  PARITY_SECS=8 PARITY_1T_AT=64 PARITY_VARIANT_THREADS=2 python3 benches/pgbench/round_trips.py "$OUT/pg" 5 parity > "$OUT/pg.log" 2>&1
  stamp "pg: exit $?"
  python3 benches/pgbench/parity.py "$OUT/pg/raw.log" > "$OUT/pg/parity.md"
fi
if step bound; then
  stamp "bound: begin"
  PARITY_CLIENTS=32 PARITY_SECS=8 PARITY_1T_AT=32 PARITY_VARIANT_THREADS=2 PARITY_DEFAULT_THREADS=1 \
    python3 benches/pgbench/round_trips.py "$OUT/bound" 3 parity > "$OUT/bound.log" 2>&1
  stamp "bound: exit $?"
  python3 benches/pgbench/parity.py "$OUT/bound/raw.log" > "$OUT/bound/parity.md"
fi
find "$OUT" -name report.html -delete
stamp "done"
