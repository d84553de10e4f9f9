#!/usr/bin/env bash
# Instructions per op (valgrind --tool=callgrind: a count, the same for the same binary
# and inputs whatever else the machine does) of one PostgreSQL client op, writable-cte's
# mark_read, 1 client, TLS as the URL gives it (the default: rustls on both):
#   - each counterlab BIN: its closed loop (`--toggle-collect` on op_loop: the op, the
#     strategy, sqlx, TLS and the harness's bookkeeping; not the runtime's park), runs of
#     2000 and 12000 ops, per op = the difference / 10000;
#   - PGEXP (s54/pgexp's `pgexp sqlx`, bare sqlx in a loop): its main future, runs of 2
#     and 8 s on a schema the first BIN seeded, per op = the difference / the ops' difference.
# Usage: s55/callgrind-pg.sh OUT BIN...   (PGEXP=path to the built pgexp; counterlab's
#   rustix must be built with `use-libc`, as crates/sim/Cargo.toml has it since this
#   change: its own vDSO parser crashes under valgrind)
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=${1:?OUT}; shift
URL0=${COUNTERLAB_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
mkdir -p "$OUT"
log="$OUT/callgrind-pg.log"
echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)" >> "$log"
ir() { grep -E "^summary|^totals" "$1" | head -1 | awk '{print $2}'; }
incl() { # FILE PATTERN: the largest inclusive count of the lines matching PATTERN
  callgrind_annotate --inclusive=yes "$1" 2>/dev/null | grep -E "$2" | awk '{gsub(",","",$1); print $1}' | sort -n | tail -1
}
for bin in "$@"; do
  declare -A n=()
  for ops in 2000 12000; do
    f="$OUT/cg-$(basename "$bin")-$ops.out"
    valgrind --tool=callgrind --toggle-collect='*op_loop*' --callgrind-out-file="$f" \
      "$bin" run benches/pgbench/mark-read.toml --quiet --strategy writable-cte --workers 1 --ops "$ops" \
      --out "$(mktemp -d)" > /dev/null 2>&1
    n[$ops]=$(ir "$f")
  done
  echo "$(basename "$bin") op_loop instructions: 2000 ops ${n[2000]}, 12000 ops ${n[12000]}, per op $(( (n[12000] - n[2000]) / 10000 ))" | tee -a "$log"
done
if [ -n "${PGEXP:-}" ]; then
  seed=$(mktemp -d)
  "$1" run benches/pgbench/mark-read.toml --quiet --strategy writable-cte --workers 1 --ops 1 --keep --out "$seed" > /dev/null
  # The newest writable-cte namespace: the one just kept (nothing else runs meanwhile).
  S=$(psql "$URL0" -Atc "select nspname from pg_namespace where nspname like 'cl_%writable_cte' order by 1 desc limit 1")
  URL="$URL0?options=-c%20search_path%3D$S"
  declare -A ops=() ins=()
  for secs in 2 8; do
    f="$OUT/cg-pgexp-$secs.out"
    ops[$secs]=$(valgrind --tool=callgrind --callgrind-out-file="$f" "$PGEXP" sqlx "$URL" "$secs" 2>/dev/null | awk '{print $4}')
    ins[$secs]=$(incl "$f" 'main\.rs:pgexp::main::\{\{closure\}\}')
  done
  echo "pgexp main future: ${ops[2]} ops ${ins[2]}, ${ops[8]} ops ${ins[8]}, per op $(( (ins[8] - ins[2]) / (ops[8] - ops[2]) ))" | tee -a "$log"
  psql "$URL0" -qc "DROP SCHEMA $S CASCADE" -c "DROP ROLE IF EXISTS $S"
fi
rm -f "$OUT"/cg-*.out
