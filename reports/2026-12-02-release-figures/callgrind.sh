#!/usr/bin/env bash
# Instructions per mark_read op (callgrind counts instructions, so the figure holds on a
# busy machine): counterlab's conditional-update with the worker-held connection, the
# same borrowing from the pool per op (workload.connections=1: the path before issue
# 21), and pgbench on the same statements (benches/pgbench/mark_read.sql), 1 client,
# 2 000 users x 100 rows. Per op = (total at 4001 ops - total at 1 op) / 4000, so the
# seed, the check and start-up cancel out. pgbench is the real binary, not Debian's
# wrapper script (valgrind would trace the wrapper only).
# Usage: reports/2026-12-02-release-figures/callgrind.sh OUT  (a release build)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?OUT}; mkdir -p "$OUT"
URL=${COUNTERLAB_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
CL=./target/release/counterlab
TOML=benches/pgbench/mark-read.toml
PGB=$(ls /usr/lib/postgresql/*/bin/pgbench | tail -n 1)
total() { grep -h '^totals:' "$1" | awk '{print $2}'; }
per_op() { python3 -c "print(round(($2 - $1) / 4000))"; }

for mode in held pool; do
  extra=(); [ "$mode" = pool ] && extra=(--set workload.connections=1)
  for n in 1 4001; do
    valgrind --tool=callgrind --callgrind-out-file="$OUT/cl-$mode-$n.out" $CL run $TOML --quiet --workers 1 \
      --ops $n --set data.users=2000 "${extra[@]}" --out "$OUT/run-$mode-$n" >/dev/null 2>&1
  done
  echo "counterlab $mode: $(per_op "$(total "$OUT/cl-$mode-1.out")" "$(total "$OUT/cl-$mode-4001.out")") instructions/op" \
    | tee -a "$OUT/summary.txt"
done

$CL run $TOML --quiet --ops 1 --keep --set data.users=2000 --out "$OUT/seed" >/dev/null
schema=$(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['strategies'][0]['namespace'])" "$OUT/seed/report.json")
sed 's/random(1, 10000)/random(1, 2000)/' benches/pgbench/mark_read.sql > "$OUT/mark_read_2000.sql"
for n in 1 4001; do
  PGOPTIONS="-c search_path=$schema" valgrind --tool=callgrind --callgrind-out-file="$OUT/pg-$n.out" \
    "$PGB" -n -M prepared -c 1 -t $n -f "$OUT/mark_read_2000.sql" "$URL" >/dev/null 2>&1
done
psql "$URL" -qc "DROP SCHEMA \"$schema\" CASCADE; DROP ROLE \"$schema\"" >/dev/null
echo "pgbench: $(per_op "$(total "$OUT/pg-1.out")" "$(total "$OUT/pg-4001.out")") instructions/op" | tee -a "$OUT/summary.txt"
# The top functions of the held run, self cost (for the record).
callgrind_annotate --inclusive=no "$OUT/cl-held-4001.out" 2>/dev/null | sed -n '1,60p' > "$OUT/cl-held-top.txt"
rm -rf "$OUT"/run-* "$OUT/seed"
