#!/usr/bin/env bash
# One runtime thread against two, alternating in each round, each with its own 1-op
# baseline (seed and check CPU measured under the same setting): PostgreSQL
# conditional-update and writable-cte at 16 workers for 8 s (benches/pgbench/mark-read.toml),
# Redis GET and INCR at 16 workers (benches/redis/parity.toml, 300 000 ops).
# Client CPU per op = (user+sys of the run - of the 1-op run) / ops.
# Usage: reports/2026-12-05-parity/ab-threads.sh OUT [ROUNDS]   (release build)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?OUT}
ROUNDS=${2:-4}
CL=./target/release/counterlab
mkdir -p "$OUT"
cpu() { /usr/bin/time -f "%U %S" -o "$OUT/t" "$@" > /dev/null 2>&1; awk '{print $1 + $2}' "$OUT/t"; }
field() { python3 -c "import json,sys;s=json.load(open(sys.argv[1]))['strategies'][0];print(s[sys.argv[2]])" "$OUT/r/report.json" "$1"; }
one() { # NAME THREADS STOP ARGS...: one measured run (STOP: "--duration-s 8" or "--ops N") and its baseline
  local name=$1 t=$2 stop=$3; shift 3
  local base; base=$(cpu $CL run "$@" --threads "$t" -q --ops 1 --out "$OUT/b")
  local run; run=$(cpu $CL run "$@" $stop --threads "$t" -q --out "$OUT/r")
  local ops rate; ops=$(field ops_total); rate=$(field throughput_ops_per_s)
  python3 -c "import sys;b,r,o,q=map(float,sys.argv[1:5]);print(f'$name threads $t: {q:.0f} ops/s {(r-b)/o*1e6:.1f} us/op (run {r:.2f} s, base {b:.2f} s, {o:.0f} ops) load $(cut -d' ' -f1 /proc/loadavg)')" "$base" "$run" "$ops" "$rate" | tee -a "$OUT/ab.log"
}
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then order="2 1"; else order="1 2"; fi
  for t in $order; do
    one "round $round pg conditional-update" "$t" "--duration-s 8" benches/pgbench/mark-read.toml --workers 16
    one "round $round pg writable-cte" "$t" "--duration-s 8" benches/pgbench/mark-read.toml --strategy writable-cte --workers 16
    one "round $round redis get" "$t" "--ops 300000" benches/redis/parity.toml --strategy parity-get
    one "round $round redis incr" "$t" "--ops 300000" benches/redis/parity.toml --strategy parity-incr
  done
done
rm -rf "$OUT/b" "$OUT/r" "$OUT/t"
