#!/usr/bin/env bash
# Syscalls per transaction in the PostgreSQL backend, pgbench at 1 client, with each of the
# sandbox role's per-statement settings alone (as PGOPTIONS), all of them, and none:
# strace -f -c attached to the postmaster, so it counts the backend pgbench's connection forks.
set -uo pipefail
cd /work/main
OUT=${1:?OUT}; N=${N:-2000}
mkdir -p "$OUT"
URL=postgres://postgres@127.0.0.1:5432/test
S=$(/tmp/cl-main run benches/pgbench/mark-read.toml --ops 1 --keep --quiet --out "$OUT/seed" >/dev/null 2>&1; python3 -c "import json;print(json.load(open('$OUT/seed/report.json'))['strategies'][0]['namespace'])")
PM=$(head -1 /var/run/postgresql/15-main.pid)
declare -A V=(
  [none]=""
  [statement_timeout]="-c statement_timeout=10000ms"
  [lock_timeout]="-c lock_timeout=10000ms"
  [idle_in_tx]="-c idle_in_transaction_session_timeout=11000ms"
  [check_interval]="-c client_connection_check_interval=250ms"
  [all]="-c statement_timeout=10000ms -c lock_timeout=10000ms -c idle_in_transaction_session_timeout=11000ms -c work_mem=64MB -c temp_file_limit=2GB -c client_connection_check_interval=250ms"
)
for script in mark_read_cte mark_read; do
  for v in none statement_timeout lock_timeout idle_in_tx check_interval all; do
    for t in 1 $((N + 1)); do
      f="$OUT/$script-$v-$t.strace"
      strace -f -c -o "$f" -p "$PM" & st=$!
      sleep 1
      PGOPTIONS="-c search_path=$S ${V[$v]}" pgbench -n -M prepared -c 1 -j 1 -t "$t" -f "benches/pgbench/$script.sql" "$URL" >/dev/null 2>&1
      sleep 0.5; kill -INT $st; wait $st 2>/dev/null
    done
    python3 - "$OUT/$script-$v-1.strace" "$OUT/$script-$v-$((N + 1)).strace" "$script" "$v" "$N" <<'PY' | tee -a "$OUT/timers.log"
import sys
def calls(f):
    d = {}
    for line in open(f):
        p = line.split()
        if len(p) >= 5 and p[0][0].isdigit() and p[-1] not in ("total",):
            try: d[p[-1]] = int(p[3])
            except ValueError: pass
    return d
a, b = calls(sys.argv[1]), calls(sys.argv[2]); n = int(sys.argv[5])
per = {k: (b.get(k, 0) - a.get(k, 0)) / n for k in set(a) | set(b)}
tot = sum(per.values())
top = ", ".join(f"{k} {v:.2f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if v >= 0.05)
print(f"{sys.argv[3]} {sys.argv[4]}: {tot:.2f} syscalls per tx ({top})")
PY
  done
done
psql "$URL" -qc "DROP SCHEMA $S CASCADE" 2>/dev/null; psql "$URL" -qc "DROP ROLE $S"
