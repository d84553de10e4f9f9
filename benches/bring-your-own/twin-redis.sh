#!/usr/bin/env bash
# Overhead of a file-defined Redis strategy against its built-in twin: lua-script against
# lua-script-file (and redis-counter-file beside them) in one run of
# scenarios/bring-your-own-redis.toml on PostgreSQL + Redis, same seed, 10 s each; the
# order of the twins alternates per round. Prints the throughput ratio file / built-in.
# Usage: benches/bring-your-own/twin-redis.sh [OUT_DIR] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-reports/runs/byo-twin-redis}
ROUNDS=${2:-4}
mkdir -p "$OUT"
cargo build --release --quiet
: > "$OUT/summary.txt"
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then order="lua-script lua-script-file"; else order="lua-script-file lua-script"; fi
  args=()
  for s in $order redis-counter-file; do args+=(--strategy "$s"); done
  target/release/counterlab run scenarios/bring-your-own-redis.toml --backend postgres --duration-s 10 --quiet \
    "${args[@]}" --out "$OUT/round-$round" >/dev/null
  python3 - "$OUT/round-$round/report.json" "$round" "$order" >> "$OUT/summary.txt" <<'PY'
import json, sys
r = {s["strategy"]: s for s in json.load(open(sys.argv[1]))["strategies"]}
b, f, c = r["lua-script"], r["lua-script-file"], r["redis-counter-file"]
p99 = lambda s: s["ops"]["mark_read"]["latency_us"]["p99"]
print(f"round {sys.argv[2]} ({sys.argv[3]} first): built-in {b['throughput_ops_per_s']:.0f} ops/s {b['check']['verdict']}, "
      f"file {f['throughput_ops_per_s']:.0f} ops/s {f['check']['verdict']}, ratio file/built-in "
      f"{f['throughput_ops_per_s'] / b['throughput_ops_per_s']:.3f}, mark_read p99 {p99(b)} vs {p99(f)} us; "
      f"redis-counter-file {c['throughput_ops_per_s']:.0f} ops/s {c['check']['verdict']}")
PY
  tail -n 1 "$OUT/summary.txt"
done
