#!/usr/bin/env bash
# The PostgreSQL check before and after it stopped joining on the server: one seeded
# namespace (`counterlab prepare` of scenario.toml, 1M users x 10 rows; `load --segment
# 1/1`, 2 000 ops), then ROUNDS rounds of three: the bare truth query (psql, every row
# streamed and discarded), `counterlab check` with the BEFORE binary and with the AFTER
# one (each report.json's `check_s`), the order rotating between rounds; then `teardown`.
# Usage: measure.sh OUT_DIR ROUNDS BEFORE_BINARY [AFTER_BINARY]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../.."
OUT=${1:?OUT_DIR}; ROUNDS=${2:?ROUNDS}; BEFORE=${3:?BEFORE_BINARY}; AFTER=${4:-./target/release/counterlab}
export COUNTERLAB_RUN_SECRET=${COUNTERLAB_RUN_SECRET:-$(openssl rand -hex 32)}
BARE="SELECT user_id, count(*) FROM notifications WHERE NOT is_read GROUP BY user_id"
d="$OUT/postgres"; rm -rf "$d"; mkdir -p "$d"
secs() { python3 -c "import time;print(f'{time.time():.3f}')"; }
$AFTER prepare "$HERE/scenario.toml" --set 'backends=["postgres"]' --handle "$d/run.json" >/dev/null
$AFTER load --handle "$d/run.json" --segment 1/1 --out "$d/agents" >/dev/null
ns=$(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['cells'][0]['namespace'])" "$d/run.json")
bare() {
  local t0; t0=$(secs)
  PGOPTIONS="-c search_path=$ns" psql -h 127.0.0.1 -U postgres -d test -Atqc "$BARE" >/dev/null
  python3 -c "print(f'{$(secs) - $t0:.3f}')"
}
check() { # check BINARY NAME
  local r="$d/check-$2"
  "$1" check --handle "$d/run.json" --from "$d/agents" --out "$r" > "$r.log" 2>&1 || true
  python3 -c "import json,sys;s=json.load(open(sys.argv[1]))['strategies'][0];print(f\"{s['check_s']:.3f} {s['check']['verdict']}\")" "$r/report.json"
  rm -f "$r/report.html"
}
for r in $(seq 1 "$ROUNDS"); do
  case $((r % 3)) in
    1) b=$(bare); x=$(check "$BEFORE" "before-$r"); y=$(check "$AFTER" "after-$r") ;;
    2) x=$(check "$BEFORE" "before-$r"); y=$(check "$AFTER" "after-$r"); b=$(bare) ;;
    0) y=$(check "$AFTER" "after-$r"); b=$(bare); x=$(check "$BEFORE" "before-$r") ;;
  esac
  echo "round $r bare_s $b before_s ${x% *} ${x#* } after_s ${y% *} ${y#* } before/bare $(python3 -c "print(f'{${x% *} / $b:.2f}')") after/bare $(python3 -c "print(f'{${y% *} / $b:.2f}')")" | tee -a "$OUT/raw.log"
done
$AFTER teardown --handle "$d/run.json" >/dev/null
python3 - "$OUT/raw.log" <<'PY' | tee "$OUT/summary.md"
import re, statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.startswith("round")]
col = lambda k: [float(r[r.index(k) + 1]) for r in rows]
for k in ("bare_s", "before_s", "after_s", "before/bare", "after/bare"):
    v = col(k)
    print(f"{k}: median {statistics.median(v):.2f} ({', '.join(f'{x:.2f}' for x in v)})")
PY
