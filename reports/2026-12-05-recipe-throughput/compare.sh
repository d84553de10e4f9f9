#!/usr/bin/env bash
# Alternating pairs: the binary before (BEFORE) and after (AFTER) the reshaping (issue 32) run
# bench.toml back to back on the same servers; prints ops/s per strategy per run.
# Usage: BEFORE=/path/to/old/counterlab AFTER=/path/to/new/counterlab PAIRS=3 bash compare.sh
set -euo pipefail
cd "$(dirname "$0")"
pairs=${PAIRS:-3}
out=$(mktemp -d)
for i in $(seq 1 "$pairs"); do
  for side in before after; do
    bin=$BEFORE; [ "$side" = after ] && bin=$AFTER
    "$bin" run bench.toml --out "$out/$side-$i" --quiet > /dev/null || true
    python3 - "$out/$side-$i/report.json" "$side" "$i" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for s in r["strategies"]:
    print(f'{sys.argv[2]}\t{sys.argv[3]}\t{s["strategy"]}\t{s["throughput_ops_per_s"]:.0f}\t{s["check"]["verdict"]}')
PY
  done
done | tee runs.tsv
python3 - <<'PY'
import statistics as st
rows = [l.split("\t") for l in open("runs.tsv").read().splitlines()]
names = sorted({r[2] for r in rows})
print("strategy\tbefore median ops/s\tafter median ops/s\tafter/before")
for n in names:
    b = st.median(float(r[3]) for r in rows if r[2] == n and r[0] == "before")
    a = st.median(float(r[3]) for r in rows if r[2] == n and r[0] == "after")
    print(f"{n}\t{b:.0f}\t{a:.0f}\t{a/b:.3f}")
PY
