#!/usr/bin/env bash
# ab.sh ROUNDS STRATEGY WORKERS SECS BIN...: alternating runs, throughput and load CPU per op
R=$1; S=$2; W=$3; D=$4; shift 4
cd /work/main
for r in $(seq 1 $R); do
  bins=("$@"); if (( r % 2 == 0 )); then bins=($(printf '%s\n' "$@" | tac)); fi
  for b in "${bins[@]}"; do
    out=$(mktemp -d)
    $b run benches/pgbench/mark-read.toml --quiet --strategy $S --workers $W --duration-s $D --out $out > /dev/null 2>&1
    python3 -c "import json,sys;s=json.load(open('$out/report.json'))['strategies'][0];print('$r', '$(basename $b)', '$S', $W, round(s['throughput_ops_per_s']), round(s['client_cpu_us_per_op'],1), s['check']['verdict'], open('/proc/loadavg').read().split()[0])"
    rm -rf $out
  done
done
