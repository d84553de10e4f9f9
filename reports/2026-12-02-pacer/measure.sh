#!/usr/bin/env bash
# Open-loop schedule lag: counterlab's pacer against `pgbench -R` at the same rate on the
# same data, as alternating pairs. Per round: the closed-loop capacity of
# conditional-update mark_read (benches/pgbench/mark-read.toml, 8 workers, 10 s); then, at
# half of it, Poisson arrivals with at most 16 in flight for 15 s: counterlab
# (`--rate --workers 16 --set workload.arrival="poisson"`) and pgbench
# (`-R -c 16 -j 2 -f benches/pgbench/mark_read.sql -l`, on a fresh seed of the same data
# that counterlab leaves with --keep), the order alternating between rounds. Lag
# percentiles: counterlab's report.json; pgbench's per-transaction log (its last column
# is the schedule lag in us). Needs a release build: cargo build --release.
# Usage: reports/2026-12-02-pacer/measure.sh OUT_DIR [ROUNDS]
# Env: COUNTERLAB_POSTGRES_URL (the server both tools load), FRACTION (of the measured
# capacity to run at; 0.5 unless given).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?OUT_DIR}
ROUNDS=${2:-3}
URL=${COUNTERLAB_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
CL=./target/release/counterlab
SECS=15
FRACTION=${FRACTION:-0.5}
mkdir -p "$OUT"
LOG="$OUT/raw.log"
: > "$LOG"
scalar() { psql "$URL" -Atqc "$1"; }
field() { python3 -c "import json,sys;s=json.load(open(sys.argv[1]))['strategies'][0];print(eval(sys.argv[2]))" "$1" "$2"; }

for round in $(seq 1 "$ROUNDS"); do
  echo "round $round uptime $(uptime | sed 's/.*load average: //;s/,//g')" | tee -a "$LOG"
  $CL run benches/pgbench/mark-read.toml --quiet --duration-s 10 --out "$OUT/capacity-$round" >>"$LOG"
  cap=$(field "$OUT/capacity-$round/report.json" "s['throughput_ops_per_s']")
  half=$(python3 -c "print(round($cap * $FRACTION))")
  echo "round $round capacity $cap rate $half" | tee -a "$LOG"
  if [ $((round % 2)) -eq 1 ]; then order="pgbench counterlab"; else order="counterlab pgbench"; fi
  for tool in $order; do
    scalar "CHECKPOINT" >/dev/null 2>&1 || true
    if [ "$tool" = pgbench ]; then
      $CL run benches/pgbench/mark-read.toml --ops 1 --keep --quiet --out "$OUT/seed-$round" >>"$LOG"
      schema=$(field "$OUT/seed-$round/report.json" "s['namespace']")
      scalar "CHECKPOINT" >/dev/null 2>&1 || true
      mkdir -p "$OUT/pgbench-$round"
      (cd "$OUT/pgbench-$round" && PGOPTIONS="-c search_path=$schema" pgbench -n -M prepared -c 16 -j 2 \
        -R "$half" -T $SECS -l -f "$OLDPWD/benches/pgbench/mark_read.sql" "$URL" > pgbench.txt 2>&1)
      scalar "DROP SCHEMA \"$schema\" CASCADE; DROP ROLE \"$schema\"" >/dev/null 2>&1
      python3 - "$OUT/pgbench-$round" "$round" >> "$LOG" <<'PY'
import glob, sys
lags = sorted(int(l.split()[-1]) for f in glob.glob(sys.argv[1] + "/pgbench_log.*") for l in open(f))
q = lambda p: lags[min(len(lags) - 1, int(p * len(lags)))]
print(f"round {sys.argv[2]} pgbench n {len(lags)} lag_p50 {q(0.5)} lag_p99 {q(0.99)} lag_p999 {q(0.999)} lag_max {lags[-1]}")
PY
      rm -f "$OUT/pgbench-$round"/pgbench_log.*
    else
      $CL run benches/pgbench/mark-read.toml --quiet --rate "$half" --workers 16 --duration-s $SECS \
        --set 'workload.arrival="poisson"' --out "$OUT/counterlab-$round" >>"$LOG"
      r="$OUT/counterlab-$round/report.json"
      echo "round $round counterlab n $(field "$r" "s['open_loop']['issued']") lag_p50 $(field "$r" "s['open_loop']['schedule_lag_us']['p50']") lag_p99 $(field "$r" "s['open_loop']['schedule_lag_us']['p99']") lag_p999 $(field "$r" "s['open_loop']['schedule_lag_us']['p999']") lag_max $(field "$r" "s['open_loop']['schedule_lag_us']['max']") dropped $(field "$r" "s['open_loop']['dropped']")" >> "$LOG"
    fi
    tail -n 1 "$LOG"
  done
done
# Only the JSON feeds the tables.
find "$OUT" -name report.html -delete
echo "end uptime $(uptime | sed 's/.*load average: //;s/,//g')" | tee -a "$LOG"

python3 - "$LOG" <<'PY' | tee "$OUT/summary.md"
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"round (\d+) (pgbench|counterlab) n (\d+) lag_p50 (\d+) lag_p99 (\d+) lag_p999 (\d+) lag_max (\d+)", line)
    if m:
        rows.setdefault(int(m.group(1)), {})[m.group(2)] = [int(x) for x in m.groups()[2:]]
print("| round | tool | ops | lag p50 us | lag p99 us | lag p999 us | lag max us |")
print("|---:|---|---:|---:|---:|---:|---:|")
for r, tools in sorted(rows.items()):
    for t, v in sorted(tools.items()):
        print(f"| {r} | {t} | {v[0]} | {v[1]} | {v[2]} | {v[3]} | {v[4]} |")
for t in ("counterlab", "pgbench"):
    vs = [tools[t] for tools in rows.values() if t in tools]
    if vs:
        print(f"\n{t}: median lag p99 {statistics.median(v[2] for v in vs)} us, p999 {statistics.median(v[3] for v in vs)} us")
ratios = [tools["counterlab"][2] / max(1, tools["pgbench"][2]) for tools in rows.values() if len(tools) == 2]
if ratios:
    print(f"median per-round p99 ratio counterlab/pgbench: {statistics.median(ratios):.2f} ({', '.join(f'{x:.2f}' for x in ratios)})")
PY
