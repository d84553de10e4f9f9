#!/usr/bin/env bash
# Five default quickstart runs in a row on PostgreSQL: each run's decision outcome and
# sentence (from report.json's decision.groups[0]) with the load average before and
# after it and its wall time, appended to runs.txt beside this script.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
cargo build --quiet
out="${TMPDIR:-/tmp}/counterlab-decision-runs"
rm -rf "$out"
: > "$here/runs.txt"
for i in 1 2 3 4 5; do
  before="$(cut -d' ' -f1-3 /proc/loadavg)"
  start=$(date +%s)
  cargo run --quiet -- run scenarios/quickstart.toml --postgres postgres://postgres@127.0.0.1:5432/test \
    --out "$out/run$i" > "$out-run$i.log" 2>&1 || echo "run $i exited $?" >> "$here/runs.txt"
  end=$(date +%s)
  after="$(cut -d' ' -f1-3 /proc/loadavg)"
  python3 - "$out/run$i/report.json" "$i" "$before" "$after" "$((end - start))" >> "$here/runs.txt" <<'PY'
import json, sys
path, i, before, after, secs = sys.argv[1:]
r = json.load(open(path))
g = r["decision"]["groups"][0]
tput = {s["strategy"]: [round(x["throughput_ops_per_s"]) for x in s.get("repeats", [])] for s in r["strategies"]}
stalls = [x["strategy"] for x in g["rows"] if x.get("stall")]
print(f"run {i}: {secs} s, load {before} before, {after} after")
print(f"  outcome: {g['outcome']} (basis {g['basis']}, settled {g['settled']})")
print(f"  ops/s by repeat: {tput}")
print(f"  stalled: {stalls or 'none'}")
print(f"  sentence: {g['sentence']}")
PY
done
cat "$here/runs.txt"
