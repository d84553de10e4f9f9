#!/usr/bin/env bash
# pgbench with and without the sandbox identity's bounds (the role settings a counterlab
# namespace gets, sandbox.rs), on the same schema, rows reset unread before each run,
# alternating which goes first. TLS as the URL says (default: the server's, on here).
# Usage: bounds.sh OUT ROUNDS SCHEMA [CLIENTS] [SCRIPT]
set -euo pipefail
out=$1; rounds=$2; S=$3; c=${4:-64}; script=${5:-benches/pgbench/mark_read_cte.sql}
URL=${URL:-postgres://postgres@127.0.0.1:5432/test}
BOUNDS="-c statement_timeout=10000ms -c lock_timeout=10000ms -c idle_in_transaction_session_timeout=11000ms -c work_mem=64MB -c client_connection_check_interval=250ms"
mkdir -p "$out"; log="$out/bounds-c$c-$(basename "$script" .sql).log"
echo "# $(date -u +%FT%TZ) $c clients $script; $(uptime)" >> "$log"
one() {
  psql "$URL" -qc "UPDATE $S.notifications SET is_read = false WHERE is_read" -c "VACUUM $S.notifications" -c "CHECKPOINT"
  local opts="-c search_path=$S"; [ "$1" = bounds ] && opts="$opts $BOUNDS"
  tps=$(PGOPTIONS="$opts" pgbench -n -M prepared -c "$c" -j 2 -f "$script" -T 8 "$URL" 2>/dev/null | grep -oP 'tps = \K[0-9.]+')
  echo "round $2 $1 $tps tps load $(cut -d' ' -f1 /proc/loadavg)" | tee -a "$log"
}
for r in $(seq 1 "$rounds"); do
  if (( r % 2 )); then one plain "$r"; one bounds "$r"; else one bounds "$r"; one plain "$r"; fi
done
