#!/usr/bin/env bash
# Issue 21's remaining figures, on one release build, one after the other on a quiet
# machine (nothing else compiling): per-op client CPU and throughput pairs against pgbench
# (benches/pgbench/round_trips.py), open-loop schedule lag against pgbench -R
# (reports/2026-12-02-pacer/measure.sh), a 5M-call Redis run with every read checked, and
# peak RSS at 1M users / 10M rows and 10M / 100M. Each step logs to OUT/<step>.log.
# Usage: reports/2026-12-02-release-figures/run.sh OUT [STEPS]  (STEPS: a subset of
# "trips,pacer,redis5m,rss1m,rss10m"; a release build at ./target/release/counterlab).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?OUT}
STEPS=${2:-trips,pacer,redis5m,rss1m,rss10m}
CL=./target/release/counterlab
mkdir -p "$OUT"
step() { [[ ",$STEPS," == *",$1,"* ]]; }
stamp() { echo "$(date -u +%H:%M:%S) $* (load $(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$OUT/steps.log"; }
# timev NAME CMD...: CMD under /usr/bin/time -v, its figures in OUT/NAME.time.
timev() { local n=$1; shift; /usr/bin/time -v -o "$OUT/$n.time" "$@"; }

if step trips; then
  stamp "trips: begin"
  python3 benches/pgbench/round_trips.py "$OUT/trips" 3 pairs,cpu > "$OUT/trips.log" 2>&1
  stamp "trips: exit $?"
fi
if step pacer; then
  stamp "pacer: begin"
  bash reports/2026-12-02-pacer/measure.sh "$OUT/pacer" 3 > "$OUT/pacer.log" 2>&1
  stamp "pacer: exit $?"
fi
if step redis5m; then
  stamp "redis5m: begin"
  timev redis5m $CL run reports/2026-12-02-history-spill/history-5m.toml --out "$OUT/redis5m" > "$OUT/redis5m.log" 2>&1
  stamp "redis5m: exit $?"
fi
for size in 1m 10m; do
  if step "rss$size"; then
    stamp "rss$size: begin"
    timev "rss$size" $CL run "reports/2026-12-02-memory-and-check/memory-$size.toml" --out "$OUT/rss$size" > "$OUT/rss$size.log" 2>&1
    stamp "rss$size: exit $?"
  fi
done
find "$OUT" -name report.html -delete
stamp "done"
