#!/usr/bin/env bash
# Issue 37's memory figures: peak RSS (/usr/bin/time -v) of a 1-op run at 1, 64 and 256
# workers, and of the 1M users / 10M rows run at 16 workers, on each SQL backend.
# Usage: reports/2026-12-05-parity/rss.sh OUT   (a release build: COUNTERLAB_BIN, else ./target/release/counterlab)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?OUT}
CL=${COUNTERLAB_BIN:-./target/release/counterlab}
mkdir -p "$OUT"
rss() { awk -F': ' '/Maximum resident set size/ {printf "%.1f", $2/1024}' "$1"; }
for backend in sqlite postgres mysql; do
  for w in 1 64 256; do
    /usr/bin/time -v -o "$OUT/w$w-$backend.time" $CL run scenarios/quickstart.toml --backend "$backend" \
      --strategy conditional-update --repeat 1 --ops 1 --workers "$w" -q --out "$OUT/w$w-$backend" > "$OUT/w$w-$backend.log" 2>&1
    echo "1-op run, $w workers, $backend: exit $? peak RSS $(rss "$OUT/w$w-$backend.time") MB (load $(cut -d' ' -f1 /proc/loadavg))" | tee -a "$OUT/rss.log"
  done
  /usr/bin/time -v -o "$OUT/10m-$backend.time" $CL run reports/2026-12-02-memory-and-check/memory-1m.toml --backend "$backend" \
    --workers 16 -q --out "$OUT/10m-$backend" > "$OUT/10m-$backend.log" 2>&1
  echo "1M users / 10M rows, 16 workers, 5 s, $backend: exit $? peak RSS $(rss "$OUT/10m-$backend.time") MB (load $(cut -d' ' -f1 /proc/loadavg))" | tee -a "$OUT/rss.log"
done
find "$OUT" -name report.html -delete
