#!/usr/bin/env bash
# The final check inside the tool against the bare truth query, on one seeded namespace
# per backend: `counterlab prepare` (1M users x 10 rows), `load --segment 1/1` (2000 ops),
# then PAIRS pairs of `counterlab check` (its report.json `check_s`) and the bare query
# (`SELECT user_id, count(*) FROM notifications WHERE NOT is_read GROUP BY user_id`, every
# row streamed to the client and discarded), the order alternating between pairs; then
# `teardown`. Needs a release build. Usage: measure.sh OUT_DIR [PAIRS] [BACKENDS...]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../.."
OUT=${1:?OUT_DIR}; PAIRS=${2:-3}; shift 2 || true
BACKENDS=${*:-postgres mysql}
CL=./target/release/counterlab
export COUNTERLAB_RUN_SECRET=${COUNTERLAB_RUN_SECRET:-$(openssl rand -hex 32)}
BARE="SELECT user_id, count(*) FROM notifications WHERE NOT is_read GROUP BY user_id"
mkdir -p "$OUT"
secs() { python3 -c "import time;print(f'{time.time():.3f}')"; }
for be in $BACKENDS; do
  d="$OUT/$be"; rm -rf "$d"; mkdir -p "$d"
  $CL prepare "$HERE/scenario.toml" --set "backends=[\"$be\"]" --handle "$d/run.json" >/dev/null
  $CL load --handle "$d/run.json" --segment 1/1 --out "$d/agents" >/dev/null
  ns=$(python3 -c "import json,sys;h=json.load(open(sys.argv[1]));print(h['cells'][0]['namespace'])" "$d/run.json")
  bare() {
    local t0; t0=$(secs)
    if [ "$be" = postgres ]; then
      PGOPTIONS="-c search_path=$ns" psql -h 127.0.0.1 -U postgres -d test -Atqc "$BARE" >/dev/null
    else
      mariadb -h 127.0.0.1 -u root "$ns" -N -e "$BARE" >/dev/null
    fi
    python3 -c "print(f'{$(secs) - $t0:.3f}')"
  }
  check() {
    local r="$d/check-$1"
    $CL check --handle "$d/run.json" --from "$d/agents" --out "$r" >/dev/null || true
    python3 -c "import json,sys;s=json.load(open(sys.argv[1]))['strategies'][0];print(f\"{s['check_s']:.3f} {s['check']['verdict']}\")" "$r/report.json"
    rm -f "$r/report.html"
  }
  for p in $(seq 1 "$PAIRS"); do
    if [ $((p % 2)) -eq 1 ]; then b=$(bare); c=$(check "$p"); else c=$(check "$p"); b=$(bare); fi
    echo "$be pair $p bare_s $b check_s ${c% *} verdict ${c#* } ratio $(python3 -c "print(f'{${c% *} / $b:.2f}')")" | tee -a "$OUT/raw.log"
  done
  $CL teardown --handle "$d/run.json" >/dev/null
done
