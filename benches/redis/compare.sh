#!/usr/bin/env bash
# counterlab vs redis-benchmark on zset-buffer's hot path, ZINCRBY on the buffer key with
# a uniform random member out of 10 000 users, same client count, back to back, order
# alternating per round. Then one counterlab run of mark_read on all eight strategies
# (benches/redis/mark-read-all.toml), which also gives the flush throughput.
# Usage: benches/redis/compare.sh [OUT_DIR] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-reports/runs/redis-compare}
ROUNDS=${2:-3}
CLIENTS=8
SECONDS_PER_RUN=10
KEY='cl:6d1d395e896d1d39:{buf}:pending'  # redis_prefix("bench") + {buf}:pending, as benches/redis_zincrby.rs
mkdir -p "$OUT"
LOG="$OUT/raw.log"
: > "$LOG"
cargo bench --bench redis_zincrby --no-run >/dev/null 2>&1
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then order="redis-benchmark counterlab"; else order="counterlab redis-benchmark"; fi
  for tool in $order; do
    if [ "$tool" = counterlab ]; then
      line=$(cargo bench --bench redis_zincrby -- $CLIENTS $SECONDS_PER_RUN 10000 2>/dev/null | grep counterlab_zincrby)
      echo "round $round $line" | tee -a "$LOG"
    else
      # About as many requests as counterlab does in SECONDS_PER_RUN.
      rps=$(redis-benchmark -h 127.0.0.1 -p 6379 -c $CLIENTS -n 800000 -r 10000 -q ZINCRBY "$KEY" 1 __rand_int__ \
        | tr '\r' '\n' | grep -oP '[0-9.]+(?= requests per second)' | tail -n 1)
      redis-cli -h 127.0.0.1 -p 6379 del "$KEY" >/dev/null
      echo "round $round redis_benchmark clients=$CLIENTS rps=$rps" | tee -a "$LOG"
    fi
  done
done
python3 - "$LOG" <<'PY' | tee "$OUT/summary.md"
import re, statistics, sys
r = {}
for line in open(sys.argv[1]):
    m = re.match(r"round (\d+) (\S+) .*?(?:ops_per_s|rps)=([0-9.]+)", line)
    if m: r.setdefault(int(m.group(1)), {})[m.group(2)] = float(m.group(3))
print("| round | redis-benchmark rps | counterlab ops/s | ratio |\n|---:|---:|---:|---:|")
ratios = []
for k, v in sorted(r.items()):
    ratio = v["counterlab_zincrby"] / v["redis_benchmark"]; ratios.append(ratio)
    print(f"| {k} | {v['redis_benchmark']:.0f} | {v['counterlab_zincrby']:.0f} | {ratio:.3f} |")
print(f"\nmedian ratio counterlab/redis-benchmark: {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})")
PY
./target/release/counterlab run benches/redis/mark-read-all.toml --quiet --out "$OUT/mark-read-all" > "$OUT/mark-read-all.txt"
