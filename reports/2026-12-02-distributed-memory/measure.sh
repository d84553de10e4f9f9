#!/usr/bin/env bash
# Peak RSS of the distributed `check` before and after its histories streamed: one
# distributed run of scenario.toml (`prepare`, 2 `load --segment K/2` at once), then
# ROUNDS rounds of `check` with the BEFORE binary and the AFTER one on the same agents'
# outputs, order alternating, each under /usr/bin/time -v; then `teardown`.
# Usage: measure.sh OUT_DIR ROUNDS BEFORE_BINARY [AFTER_BINARY]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:?OUT_DIR}; ROUNDS=${2:?ROUNDS}; BEFORE=${3:?BEFORE_BINARY}; AFTER=${4:-$HERE/../../target/release/counterlab}
export COUNTERLAB_RUN_SECRET=${COUNTERLAB_RUN_SECRET:-$(openssl rand -hex 32)}
mkdir -p "$OUT"
"$AFTER" prepare "$HERE/scenario.toml" --handle "$OUT/h.json" > "$OUT/prepare.log" 2>&1
for k in 1 2; do
  /usr/bin/time -v -o "$OUT/load-$k.time" "$AFTER" load --handle "$OUT/h.json" --segment "$k/2" --out "$OUT/agents" \
    > "$OUT/load-$k.log" 2>&1 &
done
wait
check() { # check BINARY NAME
  /usr/bin/time -v -o "$OUT/$2.time" "$1" check --handle "$OUT/h.json" --from "$OUT/agents" --out "$OUT/$2" \
    > "$OUT/$2.log" 2>&1 || true
  local rss wall
  rss=$(awk -F': ' '/Maximum resident/ {print $2}' "$OUT/$2.time")
  wall=$(awk -F': ' '/Elapsed \(wall/ {print $2}' "$OUT/$2.time")
  python3 - "$OUT/$2/report.json" "$2" "$rss" "$wall" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["strategies"][0]
h = s["history"]
print(f"{sys.argv[2]} rss_mb {int(sys.argv[3]) / 1024:.1f} wall {sys.argv[4]} verdict {s['check']['verdict']} "
      f"events {h['events']} reads_checked {h['reads_checked']} dropped {h['dropped']} check_s {s['check_s']:.2f}")
PY
  rm -f "$OUT/$2/report.html"
}
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then check "$BEFORE" "before-$r"; check "$AFTER" "after-$r"
  else check "$AFTER" "after-$r"; check "$BEFORE" "before-$r"; fi
done | tee "$OUT/raw.log"
"$AFTER" teardown --handle "$OUT/h.json" > "$OUT/teardown.log" 2>&1
