#!/usr/bin/env bash
# Whole-process user-space events per op of writable-cte's 1-client op (TLS, the default),
# counted by valgrind (callgrind with its cache and branch simulators: counts, not
# seconds, so the same for the same binary whatever else the machine does):
#   - each counterlab BIN: runs of 2000 and 12000 ops, per op = the difference / 10000
#     (every thread, the run's per-op share of its check included);
#   - pgbench (the binary, not Debian's wrapper, which valgrind would not follow), the
#     one-statement twin script: 2001 and 12001 transactions on a schema the first BIN
#     seeded and kept, the same difference.
# Events: Ir instructions; Dr/Dw data reads/writes; I1mr, D1mr, D1mw first-level misses;
# ILmr/DLmr/DLmw last-level misses; Bc/Bcm conditional branches/mispredicted; Bi/Bim
# indirect branches/mispredicted (valgrind's simulated caches, not this CPU's).
# Usage: s56/cgsim.sh OUT BIN...
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=${1:?OUT}; shift
URL0=${COUNTERLAB_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
PGB=${PGBENCH:-$(ls -d /usr/lib/postgresql/*/bin/pgbench | tail -1)}
mkdir -p "$OUT"
log="$OUT/cgsim.log"
echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)" >> "$log"
per_op() { # TAG FILE_SMALL FILE_LARGE DIVISOR
  python3 - "$@" <<'P'
import sys
tag, small, large, div = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def events(f):
    names = None
    for line in open(f):
        if line.startswith("events:"):
            names = line.split()[1:]
        if line.startswith(("summary:", "totals:")):
            return dict(zip(names, map(int, line.split()[1:])))
a, b = events(small), events(large)
print(tag, " ".join(f"{k}={(b[k] - a[k]) / div:.0f}" for k in a))
P
}
cg() { valgrind --tool=callgrind --cache-sim=yes --branch-sim=yes --callgrind-out-file="$1" "${@:2}"; }
for bin in "$@"; do
  tag=$(basename "$bin")
  for ops in 2000 12000; do
    cg "$OUT/cg-$tag-$ops.out" "$bin" run benches/pgbench/mark-read.toml --quiet --strategy writable-cte \
      --workers 1 --ops "$ops" --out "$(mktemp -d)" > /dev/null 2>&1
  done
  per_op "$tag" "$OUT/cg-$tag-2000.out" "$OUT/cg-$tag-12000.out" 10000 | tee -a "$log"
done
seed=$(mktemp -d)
"$1" run benches/pgbench/mark-read.toml --quiet --ops 1 --keep --out "$seed" > /dev/null
S=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['strategies'][0]['namespace'])" "$seed/report.json")
for tx in 2001 12001; do
  PGOPTIONS="-c search_path=$S" cg "$OUT/cg-pgbench-$tx.out" "$PGB" -n -M prepared -c 1 -j 1 \
    -f benches/pgbench/mark_read_cte.sql -t "$tx" "$URL0?sslmode=require" > /dev/null 2>&1
done
per_op pgbench "$OUT/cg-pgbench-2001.out" "$OUT/cg-pgbench-12001.out" 10000 | tee -a "$log"
psql "$URL0" -qc "DROP SCHEMA $S CASCADE" -c "DROP ROLE IF EXISTS $S" 2> /dev/null
rm -f "$OUT"/cg-*.out
