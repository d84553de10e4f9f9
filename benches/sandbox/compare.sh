#!/usr/bin/env bash
# Does running as the namespace's own identity cost throughput? The same release build,
# back to back, alternating: each strategy once with the configured (superuser) accounts,
# which give each namespace its own role / user / ACL user, and once with accounts that
# cannot create identities, so the namespace runs as that account (the pre-sandbox path).
# Usage: benches/sandbox/compare.sh [OUT_DIR] [ROUNDS] [SECONDS]   (needs a release build)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-reports/runs/sandbox-compare}
ROUNDS=${2:-3}
SECS=${3:-10}
CL=./target/release/counterlab
PG=postgres://postgres@127.0.0.1:5432/test
MY=mysql://root@127.0.0.1:3306/test
RD=redis://127.0.0.1:6379
PW=bench-limited-pw
mkdir -p "$OUT"

# Accounts that may create namespaces but not identities (removed at exit).
setup() {
  psql "$PG" -qc "CREATE ROLE cl_bench_limited LOGIN PASSWORD '$PW' NOCREATEROLE; GRANT CREATE ON DATABASE test TO cl_bench_limited"
  mariadb -h127.0.0.1 -uroot -e "CREATE USER 'cl_bench_limited'@'%' IDENTIFIED BY '$PW'; GRANT ALL ON \`cl\\_%\`.* TO 'cl_bench_limited'@'%'"
  redis-cli ACL SETUSER cl_bench_limited on ">$PW" '~*' '&*' +@all -acl >/dev/null
}
teardown() {
  psql "$PG" -qc "REVOKE CREATE ON DATABASE test FROM cl_bench_limited; DROP OWNED BY cl_bench_limited; DROP ROLE IF EXISTS cl_bench_limited" || true
  mariadb -h127.0.0.1 -uroot -e "DROP USER IF EXISTS 'cl_bench_limited'@'%'" || true
  redis-cli ACL DELUSER cl_bench_limited >/dev/null || true
}
trap teardown EXIT
setup

# run MODE BACKEND STRATEGY DIR
run() {
  local pg=$PG my=$MY rd=$RD
  if [ "$1" = shared ]; then
    pg="postgres://cl_bench_limited:$PW@127.0.0.1:5432/test"
    my="mysql://cl_bench_limited:$PW@127.0.0.1:3306"
    rd="redis://cl_bench_limited:$PW@127.0.0.1:6379"
  fi
  "$CL" run scenarios/quickstart.toml --backend "$2" --strategy "$3" --duration-s "$SECS" --seed 7 \
    --postgres "$pg" --mysql "$my" --redis "$rd" --quiet --out "$4" >/dev/null || [ -f "$4/report.json" ]
}
field() { python3 -c "import json,sys;s=json.load(open(sys.argv[1]))['strategies'][0];print(s[sys.argv[2]])" "$1" "$2"; }

echo "round backend strategy mode ops_per_s identity" > "$OUT/results.txt"
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then order="own shared"; else order="shared own"; fi
  for target in "postgres conditional-update" "mysql conditional-update" "postgres redis-counter"; do
    set -- $target
    for mode in $order; do
      dir="$OUT/$round-$1-$2-$mode"
      run "$mode" "$1" "$2" "$dir"
      echo "$round $1 $2 $mode $(field "$dir/report.json" throughput_ops_per_s) \"$(field "$dir/report.json" identity)\"" | tee -a "$OUT/results.txt"
    done
  done
done
python3 - "$OUT/results.txt" <<'PY' | tee "$OUT/summary.md"
import sys, statistics, collections
rows = [l.split(None, 5) for l in open(sys.argv[1]).read().splitlines()[1:]]
by = collections.defaultdict(lambda: collections.defaultdict(list))
for r, b, s, m, t, _ in rows:
    by[(b, s)][m].append((int(r), float(t)))
print("| backend | strategy | own identity ops/s (median) | shared account ops/s (median) | own/shared per round |")
print("|---|---|---|---|---|")
for (b, s), m in by.items():
    own, sh = dict(m["own"]), dict(m["shared"])
    ratios = ", ".join(f"{own[k] / sh[k]:.3f}" for k in sorted(own))
    print(f"| {b} | {s} | {statistics.median(own.values()):.0f} | {statistics.median(sh.values()):.0f} | {ratios} |")
PY
