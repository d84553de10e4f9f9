#!/usr/bin/env bash
# counterlab vs pgbench on the same data, back to back, alternating, in one run:
#  1. seed throughput: counterlab's COPY seed of 1M notifications vs `pgbench -i -s 10`
#     (1M pgbench_accounts rows), each into its own scratch schema;
#  2. mark_read throughput: counterlab's conditional-update vs mark_read.sql under pgbench
#     (-M prepared, same client count), each on a freshly seeded copy of the same data,
#     after a CHECKPOINT, the order alternating between rounds.
# Usage: benches/pgbench/compare.sh [OUT_DIR] [ROUNDS]   (needs a release build)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-reports/runs/pgbench-compare}
ROUNDS=${2:-2}
URL=${COUNTERLAB_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
CL=./target/release/counterlab
CLIENTS=8
SECONDS_PER_RUN=20
mkdir -p "$OUT"
LOG="$OUT/raw.log"
: > "$LOG"

scalar() { psql "$URL" -Atqc "$1"; }
# json FILE KEY: a field of the first strategy in a report (KEY under check. tried too).
json() { python3 -c "import json,sys;s=json.load(open(sys.argv[1]))['strategies'][0];print(s.get(sys.argv[2], s['check'].get(sys.argv[2])))" "$1" "$2"; }

for round in $(seq 1 "$ROUNDS"); do
  # -- seed: pgbench -i into a scratch schema (never public)
  schema="cl_bench_pgbench_init"
  scalar "DROP SCHEMA IF EXISTS $schema CASCADE; CREATE SCHEMA $schema" 2>/dev/null
  start=$(date +%s.%N)
  PGOPTIONS="-c search_path=$schema" pgbench -i -q -s 10 -I dtgvp "$URL" >>"$LOG" 2>&1
  end=$(date +%s.%N)
  scalar "DROP SCHEMA $schema CASCADE" 2>/dev/null
  echo "round $round pgbench_init_s $(echo "$end - $start" | bc)" | tee -a "$LOG"

  if [ $((round % 2)) -eq 1 ]; then order="pgbench counterlab"; else order="counterlab pgbench"; fi
  for tool in $order; do
    scalar "CHECKPOINT" >/dev/null 2>&1 || true
    if [ "$tool" = pgbench ]; then
      # A fresh seed of the same data: counterlab seeds it, runs 1 op, keeps the schema.
      "$CL" run benches/pgbench/mark-read.toml --ops 1 --keep --quiet --out "$OUT/seed-$round" >>"$LOG"
      schema=$(json "$OUT/seed-$round/report.json" namespace)
      echo "round $round counterlab_seed_s $(json "$OUT/seed-$round/report.json" seed_s)" | tee -a "$LOG"
      scalar "CHECKPOINT" >/dev/null 2>&1 || true
      PGOPTIONS="-c search_path=$schema" pgbench -n -M prepared -c $CLIENTS -j 2 -T $SECONDS_PER_RUN \
        -f benches/pgbench/mark_read.sql "$URL" > "$OUT/pgbench-$round.txt" 2>&1
      tps=$(grep -oP 'tps = \K[0-9.]+(?= \(without)' "$OUT/pgbench-$round.txt")
      drift=$(scalar "SELECT count(*) FROM $schema.unread_counts c WHERE c.unread <> (SELECT count(*) FROM $schema.notifications n WHERE n.user_id = c.user_id AND NOT n.is_read)")
      scalar "DROP SCHEMA $schema CASCADE" 2>/dev/null
      echo "round $round pgbench_tps $tps pgbench_mismatched_users $drift" | tee -a "$LOG"
    else
      "$CL" run benches/pgbench/mark-read.toml --quiet --workers $CLIENTS --duration-s $SECONDS_PER_RUN --out "$OUT/counterlab-$round" >>"$LOG"
      echo "round $round counterlab_ops_per_s $(json "$OUT/counterlab-$round/report.json" throughput_ops_per_s) counterlab_mismatched_users $(json "$OUT/counterlab-$round/report.json" users_mismatched)" | tee -a "$LOG"
    fi
  done
done

# Summary: per-round ratios (counterlab / pgbench; for the seed, pgbench time / counterlab
# time, so above 1 means counterlab is faster) and their medians, with versions.
python3 - "$LOG" "$OUT" <<'PY' | tee "$OUT/summary.md"
import re, statistics, subprocess, sys, json, glob
log, out = sys.argv[1], sys.argv[2]
rounds = {}
for line in open(log):
    m = re.match(r"round (\d+) (.*)", line)
    if m:
        toks = m.group(2).split()
        rounds.setdefault(int(m.group(1)), {}).update(dict(zip(toks[::2], map(float, toks[1::2]))))
def ver(cmd):
    try: return subprocess.run(cmd, capture_output=True, text=True, shell=True).stdout.strip().splitlines()[0]
    except Exception: return "unknown"
rep = json.load(open(sorted(glob.glob(out + "/counterlab-*/report.json"))[0]))
print("| round | pgbench tps | counterlab ops/s | ratio | pgbench -i s | counterlab seed s | seed ratio |")
print("|---:|---:|---:|---:|---:|---:|---:|")
tr, sr = [], []
for r, v in sorted(rounds.items()):
    t = v["counterlab_ops_per_s"] / v["pgbench_tps"]; s = v["pgbench_init_s"] / v["counterlab_seed_s"]
    tr.append(t); sr.append(s)
    print(f"| {r} | {v['pgbench_tps']:.0f} | {v['counterlab_ops_per_s']:.0f} | {t:.3f} | {v['pgbench_init_s']:.2f} | {v['counterlab_seed_s']:.2f} | {s:.2f} |")
print(f"\nmedian throughput ratio counterlab/pgbench: {statistics.median(tr):.3f} (min {min(tr):.3f}, max {max(tr):.3f})")
print(f"median seed ratio pgbench -i time / counterlab seed time: {statistics.median(sr):.2f}")
print(f"\ncounterlab {rep['counterlab_version']} commit {rep['git_commit']}; {ver('rustc --version')}")
print(f"server: postgres {rep['servers'][0]['version']}; {ver('pgbench --version')}")
print(f"mismatched users after every run: pgbench {sorted({v.get('pgbench_mismatched_users') for v in rounds.values()})}, counterlab {sorted({v.get('counterlab_mismatched_users') for v in rounds.values()})}")
PY
