#!/usr/bin/env bash
# 1, 2 and 4 local agents against the same PostgreSQL, alternating (1 2 4 1 2 4 ...),
# each run: prepare, N `load` processes at once (each timed by /usr/bin/time), check,
# teardown. Prints one line per agent: n k wall_s user_s sys_s ops ops_per_s.
#   COUNTERLAB_RUN_SECRET=... bash reports/2026-12-02-distributed/run.sh target/release/counterlab
set -euo pipefail
BIN=${1:-target/release/counterlab}
ROUNDS=${ROUNDS:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export COUNTERLAB_RUN_SECRET=${COUNTERLAB_RUN_SECRET:-distributed-report-secret}
for round in $(seq 1 "$ROUNDS"); do
  for n in 1 2 4; do
    d="$WORK/r$round-n$n"; mkdir -p "$d"
    "$BIN" prepare "$HERE/scenario.toml" --handle "$d/h.json" >/dev/null 2>"$d/prepare.err"
    for k in $(seq 1 "$n"); do
      /usr/bin/time -f "%e %U %S" -o "$d/time-$k" "$BIN" load --handle "$d/h.json" --segment "$k/$n" --out "$d/agents" \
        >/dev/null 2>"$d/load-$k.err" &
    done
    wait
    "$BIN" check --handle "$d/h.json" --from "$d/agents" --out "$d/report" >/dev/null 2>"$d/check.err" || echo "check exit $?" >&2
    "$BIN" teardown --handle "$d/h.json" >/dev/null 2>"$d/teardown.err"
    for k in $(seq 1 "$n"); do
      read -r wall user sys < "$d/time-$k"
      ops=$(python3 -c "import json,sys; c=json.load(open('$d/agents/agent-$k-of-$n/partial.json'))['cells'][0]; print(c['ops_total'], round(c['throughput_ops_per_s']))")
      echo "$n $k $wall $user $sys $ops"
    done
    python3 -c "import json; r=json.load(open('$d/report/report.json'))['strategies'][0]; print('total', $n, r['ops_total'], round(r['throughput_ops_per_s']), r['check']['verdict'])"
  done
done
