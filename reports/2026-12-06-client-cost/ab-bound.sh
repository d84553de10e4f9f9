#!/usr/bin/env bash
# A/B of the one-thread bound (`ONE_THREAD_MAX_WORKERS`), one binary: one thread
# (`--threads 1`: the current-thread scheduler) against `--threads 2`, alternating order
# per round; each line one run's throughput and client CPU per op over the load. (When
# recheck/ab-bound ran, the bound was 32 and the one-thread side was the default.)
#   PostgreSQL (benches/pgbench/mark-read.toml, 8 s): conditional-update at 16 and 32
#   workers, writable-cte at 32.
# Usage: reports/2026-12-06-client-cost/ab-bound.sh OUT [ROUNDS]   (a release build, or COUNTERLAB_BIN;
# AB_CELLS="LABEL STRATEGY WORKERS;..." replaces the three cells)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?OUT}
ROUNDS=${2:-4}
CL=${COUNTERLAB_BIN:-./target/release/counterlab}
mkdir -p "$OUT/runs"
one() { # LABEL VARIANT ARGS...
  local label=$1 variant=$2; shift 2
  local dir="$OUT/runs/$label-$variant-$r" extra=()
  if [ "$variant" = t2 ]; then extra=(--threads 2); else extra=(--threads 1); fi
  $CL run "$@" "${extra[@]}" -q --out "$dir" > "$dir.log" 2>&1
  python3 - "$dir/report.json" "$label" "$variant" "$r" <<'PY' | tee -a "$OUT/ab.log"
import json, os, sys
s = json.load(open(sys.argv[1]))["strategies"][0]
print(f"round {sys.argv[4]} {sys.argv[2]} {sys.argv[3]} ops_s {s['throughput_ops_per_s']:.0f} "
      f"cpu_us_op {s['client_cpu_us_per_op']:.2f} load {os.getloadavg()[0]:.2f}")
PY
}
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="ct t2"; else order="t2 ct"; fi
  IFS=';' read -ra cells <<< "${AB_CELLS:-cond-c16 conditional-update 16;cond-c32 conditional-update 32;cte-c32 writable-cte 32}"
  for cell in "${cells[@]}"; do
    set -- $cell
    for v in $order; do
      one "$1" "$v" benches/pgbench/mark-read.toml --strategy "$2" --workers "$3" --duration-s 8
    done
  done
done
find "$OUT" -name report.html -delete
