#!/usr/bin/env bash
# The open-loop driver's schedule keeping on a real server: per round, the closed-loop
# capacity of conditional-update on PostgreSQL (8 workers, 10 s), then an open loop at
# half of it (at most 16 in flight, 10 s), reading schedule lag and achieved/target from
# report.json; then the driver alone against a no-op strategy (CPU per 10k ops/s).
# Usage: benches/open-loop/measure.sh [OUT_DIR] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-reports/runs/open-loop-measure}
ROUNDS=${2:-3}
mkdir -p "$OUT"
cargo build --release --quiet
BIN=target/release/counterlab
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
for round in $(seq 1 "$ROUNDS"); do
  $BIN run benches/open-loop/capacity.toml --quiet --out "$OUT/closed-$round" >/dev/null
  cap=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['strategies'][0]['throughput_ops_per_s'])" "$OUT/closed-$round/report.json")
  half=$(python3 -c "print(round($cap / 2))")
  $BIN run benches/open-loop/capacity.toml --quiet --rate "$half" --workers 16 --duration-s 10 --out "$OUT/open-$round" >/dev/null
  python3 - "$OUT/open-$round/report.json" "$round" "$cap" >> "$SUMMARY" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); s = r["strategies"][0]; o = s["open_loop"]; l = o["schedule_lag_us"]
print(f"round {sys.argv[2]}: closed-loop capacity {float(sys.argv[3]):.0f} ops/s; open loop at {o['target_ops_per_s']:.0f} ops/s: "
      f"achieved/target {o['achieved_over_target']:.4f}, dropped {o['dropped']}, late(>1ms) {o['late']} of {o['issued']}, "
      f"schedule lag p50 {l['p50']} us p99 {l['p99']} us p999 {l['p999']} us max {l['max']} us; "
      f"latency p99 corrected {max(v['latency_us']['p99'] for v in s['ops'].values())} us, "
      f"uncorrected {max(v['uncorrected_latency_us']['p99'] for v in s['ops'].values())} us")
PY
  tail -n 1 "$SUMMARY"
done
echo "driver alone (no-op strategy, 10 s per rate):" | tee -a "$SUMMARY"
cargo bench --quiet --bench open_loop_driver -- 10 1000 5000 10000 20000 2>/dev/null | tee -a "$SUMMARY"
