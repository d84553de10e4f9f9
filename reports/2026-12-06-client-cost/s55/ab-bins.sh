#!/usr/bin/env bash
# A/B of two release builds on PostgreSQL (benches/pgbench/mark-read.toml), rounds
# alternating which build goes first; each line one run's throughput and client CPU per
# op over the load (the run's own `client_cpu_us_per_op`), its verdict and the load.
# Usage: s55/ab-bins.sh OUT ROUNDS   with A_BIN, B_BIN (default /tmp/cl-base, /tmp/cl-new),
#   AB_CELLS="LABEL STRATEGY WORKERS;..." (default: writable-cte at 1, 16 and 64 workers,
#   conditional-update at 16) and AB_SECS (default 8). TLS as the URL says (the default).
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT=${1:?OUT}
ROUNDS=${2:-4}
A_BIN=${A_BIN:-/tmp/cl-base}
B_BIN=${B_BIN:-/tmp/cl-new}
mkdir -p "$OUT"
echo "# $(date -u +%FT%TZ) A=$A_BIN ($(sha256sum "$A_BIN" | cut -c1-12)) B=$B_BIN ($(sha256sum "$B_BIN" | cut -c1-12)) load $(cut -d' ' -f1 /proc/loadavg)" >> "$OUT/ab.log"
one() { # TAG BIN LABEL STRATEGY WORKERS
  local dir
  dir=$(mktemp -d)
  "$2" run benches/pgbench/mark-read.toml --quiet --strategy "$4" --workers "$5" --duration-s "${AB_SECS:-8}" --out "$dir" > "$dir.log" 2>&1
  python3 - "$dir/report.json" "$1" "$3" "$r" <<'PY' | tee -a "$OUT/ab.log"
import json, sys
s = json.load(open(sys.argv[1]))["strategies"][0]
load = open("/proc/loadavg").read().split()[0]
print(f"round {sys.argv[4]} {sys.argv[3]} {sys.argv[2]} ops_s {s['throughput_ops_per_s']:.0f} "
      f"cpu_us_op {s['client_cpu_us_per_op']:.2f} {s['check']['verdict']} load {load}")
PY
  rm -rf "$dir" "$dir.log"
}
IFS=';' read -ra cells <<< "${AB_CELLS:-cte-c1 writable-cte 1;cte-c16 writable-cte 16;cond-c16 conditional-update 16;cte-c64 writable-cte 64}"
for r in $(seq 1 "$ROUNDS"); do
  for cell in "${cells[@]}"; do
    set -- $cell
    if (( r % 2 )); then
      one A "$A_BIN" "$1" "$2" "$3"; one B "$B_BIN" "$1" "$2" "$3"
    else
      one B "$B_BIN" "$1" "$2" "$3"; one A "$A_BIN" "$1" "$2" "$3"
    fi
  done
done
