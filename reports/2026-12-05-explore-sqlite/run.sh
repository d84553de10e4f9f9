#!/usr/bin/env bash
# The SQLite explore matrix (issue 33) now that a waiter on SQLite's write lock is seen by
# counterlab's own busy handler (crates/strategies/src/busy.rs) instead of after a 150 ms
# delay: the SQL designs and mutants of scenarios/explore.toml, and the quickstart's
# autocommit-direct-update strategy file. Wall time and load before each run go to
# times.txt. Run from the repository root: `cargo build && bash reports/2026-12-05-explore-sqlite/run.sh`.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${COUNTERLAB_BIN:-target/debug/counterlab}
here=reports/2026-12-05-explore-sqlite
: > "$here/times.txt"
run() {
  local name=$1; shift
  local load; load=$(cut -d' ' -f1 /proc/loadavg)
  local t0; t0=$(date +%s.%N)
  "$bin" explore "$@" --out "$here/$name" > "$here/$name.txt" 2> "$here/$name.log"
  local code=$?
  local t1; t1=$(date +%s.%N)
  printf '%s\texit %s\t%.1f s\tload %s\t%s\n' "$name" "$code" "$(echo "$t1 - $t0" | bc)" "$load" "$*" >> "$here/times.txt"
}
run sqlite scenarios/explore.toml --backend sqlite --isolation serializable
run sqlite-autocommit scenarios/quickstart.toml --backend sqlite --strategy autocommit-direct-update
for f in "$here"/sqlite/*.replay.json "$here"/sqlite-autocommit/*.replay.json; do
  printf '%s\t%s\n' "$(basename "$f")" "$("$bin" explore --replay "$f" --times 10 2>/dev/null | tail -n 1)" >> "$here/replays.txt"
done
