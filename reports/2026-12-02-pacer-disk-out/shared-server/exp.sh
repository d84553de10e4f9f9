#!/usr/bin/env bash
# Usage: reports/2026-12-02-pacer-disk-out/shared-server/exp.sh OUT_DIR [ROUNDS] (a release build; it makes its own COUNTERLAB_RUN_SECRET).
# Variants, order rotating per round. A: counterlab run (seed then load at once); B: prepare, CHECKPOINT, load 1/1, check; P: pgbench -R on a kept seed.
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT=$1; ROUNDS=${2:-3}; SECS=15
URL=postgres://postgres@127.0.0.1:5432/test
CL=./target/release/counterlab
export COUNTERLAB_RUN_SECRET=$(openssl rand -hex 32)
mkdir -p $OUT; LOG=$OUT/raw.log; : > $LOG
field() { python3 -c "import json,sys;s=json.load(open(sys.argv[1]))['strategies'][0];print(eval(sys.argv[2]))" "$1" "$2"; }
lagline() { r=$1; echo "n $(field $r "s['open_loop']['issued']") p50 $(field $r "s['open_loop']['schedule_lag_us']['p50']") p99 $(field $r "s['open_loop']['schedule_lag_us']['p99']") p999 $(field $r "s['open_loop']['schedule_lag_us']['p999']") max $(field $r "s['open_loop']['schedule_lag_us']['max']") first_s_max $(field $r "s['series'][0]['max_us']")"; }
OL=(--rate RATE --workers 16 --duration-s $SECS --set 'workload.arrival="poisson"')
for round in $(seq 1 $ROUNDS); do
  $CL run benches/pgbench/mark-read.toml --quiet --duration-s 10 --out $OUT/cap-$round >/dev/null
  cap=$(field $OUT/cap-$round/report.json "s['throughput_ops_per_s']"); half=$(python3 -c "print(round($cap/2))")
  echo "round $round cap $cap rate $half load $(cut -d' ' -f1 /proc/loadavg)" | tee -a $LOG
  case $((round % 3)) in 1) order="A B P";; 2) order="B P A";; 0) order="P A B";; esac
  for v in $order; do
    psql $URL -qc CHECKPOINT >/dev/null
    case $v in
    A) $CL run benches/pgbench/mark-read.toml --quiet --rate $half --workers 16 --duration-s $SECS --set 'workload.arrival="poisson"' --out $OUT/A-$round >/dev/null
       echo "round $round A $(lagline $OUT/A-$round/report.json)" | tee -a $LOG;;
    B) rm -rf $OUT/B-$round; mkdir -p $OUT/B-$round
       $CL prepare benches/pgbench/mark-read.toml --rate $half --workers 16 --duration-s $SECS --set 'workload.arrival="poisson"' --handle $OUT/B-$round/h.json >/dev/null
       psql $URL -qc CHECKPOINT >/dev/null
       $CL load --handle $OUT/B-$round/h.json --segment 1/1 --out $OUT/B-$round/agents >/dev/null
       $CL check --handle $OUT/B-$round/h.json --from $OUT/B-$round/agents --out $OUT/B-$round/rep >/dev/null
       $CL teardown --handle $OUT/B-$round/h.json >/dev/null
       echo "round $round B $(lagline $OUT/B-$round/rep/report.json)" | tee -a $LOG;;
    P) $CL run benches/pgbench/mark-read.toml --ops 1 --keep --quiet --out $OUT/seed-$round >/dev/null
       schema=$(field $OUT/seed-$round/report.json "s['namespace']")
       psql $URL -qc CHECKPOINT >/dev/null
       mkdir -p $OUT/P-$round
       (cd $OUT/P-$round && PGOPTIONS="-c search_path=$schema" /usr/lib/postgresql/15/bin/pgbench -n -M prepared -c 16 -j 2 -R $half -T $SECS -l -f $PWD/benches/pgbench/mark_read.sql $URL > pgbench.txt 2>&1)
       psql $URL -qc "DROP SCHEMA \"$schema\" CASCADE; DROP ROLE \"$schema\"" >/dev/null 2>&1
       python3 - $OUT/P-$round $round >> $LOG <<'PY'
import glob, sys
rows = [l.split() for f in glob.glob(sys.argv[1] + "/pgbench_log.*") for l in open(f)]
lags = sorted(int(r[-1]) for r in rows)
t0 = min(int(r[4]) for r in rows)
first = [int(r[2]) for r in rows if int(r[4]) == t0]
q = lambda p: lags[min(len(lags) - 1, int(p * len(lags)))]
print(f"round {sys.argv[2]} P n {len(lags)} p50 {q(0.5)} p99 {q(0.99)} p999 {q(0.999)} max {lags[-1]} first_s_max {max(first)}")
PY
       rm -f $OUT/P-$round/pgbench_log.*; tail -1 $LOG;;
    esac
  done
done
