#!/usr/bin/env bash
# A/B of the closed loop's runtime, one binary: the current-thread scheduler (the default
# for a closed-loop scenario) against a multi-thread runtime of one worker
# (TOKIO_WORKER_THREADS=1, the default before). Alternating order per round; each line
# is one run: throughput and client CPU per op over the load (report.json).
#   PostgreSQL: writable-cte, 1 client, 8 s (benches/pgbench/mark-read.toml)
#   Redis: GET and ZINCRBY at 16 workers, 300 000 ops (benches/redis/parity.toml)
# Usage: reports/2026-12-06-client-cost/ab-runtime.sh OUT [ROUNDS]   (a release build)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?OUT}
ROUNDS=${2:-4}
CL=./target/release/counterlab
mkdir -p "$OUT"
one() { # LABEL VARIANT ARGS...
  local label=$1 variant=$2; shift 2
  local dir="$OUT/runs/$label-$variant-$r" env=()
  [ "$variant" = mt1 ] && env=(TOKIO_WORKER_THREADS=1)
  env "${env[@]}" $CL run "$@" -q --out "$dir" > "$dir.log" 2>&1
  python3 - "$dir/report.json" "$label" "$variant" "$r" <<'PY' | tee -a "$OUT/ab.log"
import json, os, sys
s = json.load(open(sys.argv[1]))["strategies"][0]
load = os.getloadavg()[0]
print(f"round {sys.argv[4]} {sys.argv[2]} {sys.argv[3]} ops_s {s['throughput_ops_per_s']:.0f} cpu_us_op {s['client_cpu_us_per_op']:.2f} load {load:.2f}")
PY
}
for r in $(seq 1 "$ROUNDS"); do
  mkdir -p "$OUT/runs"
  if [ $((r % 2)) = 1 ]; then order="ct mt1"; else order="mt1 ct"; fi
  for v in $order; do
    one pg-cte-c1 "$v" benches/pgbench/mark-read.toml --strategy writable-cte --workers 1 --duration-s 8
    one redis-get-c16 "$v" benches/redis/parity.toml --strategy parity-get --workers 16 --ops 300000
    one redis-zincrby-c16 "$v" benches/redis/parity.toml --strategy parity-zincrby --workers 16 --ops 300000
  done
done
find "$OUT" -name report.html -delete
