#!/usr/bin/env bash
# Overhead of a file-defined strategy against its built-in twin: conditional-update and
# select-for-update against their -file twins (and slotted-counter beside them) in one run of
# scenarios/bring-your-own.toml on PostgreSQL, same seed, 10 s each; the order of the two
# twins alternates per round. Prints the throughput ratio file / built-in per round.
# Usage: benches/bring-your-own/twin.sh [OUT_DIR] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-reports/runs/byo-twin}
ROUNDS=${2:-4}
mkdir -p "$OUT"
cargo build --release --quiet
: > "$OUT/summary.txt"
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then
    order="conditional-update conditional-update-file select-for-update select-for-update-file"
  else
    order="conditional-update-file conditional-update select-for-update-file select-for-update"
  fi
  args=()
  for s in $order slotted-counter; do args+=(--strategy "$s"); done
  target/release/counterlab run scenarios/bring-your-own.toml --backend postgres --duration-s 10 --quiet \
    "${args[@]}" --out "$OUT/round-$round" >/dev/null
  python3 - "$OUT/round-$round/report.json" "$round" "$order" >> "$OUT/summary.txt" <<'PY'
import json, sys
r = {s["strategy"]: s for s in json.load(open(sys.argv[1]))["strategies"]}
b, f, sl = r["conditional-update"], r["conditional-update-file"], r["slotted-counter"]
lb, lf = r["select-for-update"], r["select-for-update-file"]
print(f"round {sys.argv[2]} ({sys.argv[3]} first): built-in {b['throughput_ops_per_s']:.0f} ops/s {b['check']['verdict']}, "
      f"file {f['throughput_ops_per_s']:.0f} ops/s {f['check']['verdict']}, ratio file/built-in "
      f"{f['throughput_ops_per_s'] / b['throughput_ops_per_s']:.3f}; slotted-counter {sl['throughput_ops_per_s']:.0f} ops/s "
      f"{sl['check']['verdict']} ({sl['check']['users_mismatched']}/{sl['check']['users_checked']} mismatched), "
      f"ratio to built-in {sl['throughput_ops_per_s'] / b['throughput_ops_per_s']:.3f}; "
      f"select-for-update {lb['throughput_ops_per_s']:.0f} {lb['check']['verdict']}, file {lf['throughput_ops_per_s']:.0f} "
      f"{lf['check']['verdict']}, ratio {lf['throughput_ops_per_s'] / lb['throughput_ops_per_s']:.3f}")
PY
  tail -n 1 "$OUT/summary.txt"
done
