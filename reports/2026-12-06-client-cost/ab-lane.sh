#!/usr/bin/env bash
# ab-lane.sh ROUNDS CMDS: batched16 runs of two release builds, /tmp/cl-$A and /tmp/cl-$B
# (default base and lane2: copy them there), order alternating; client CPU and redis-server CPU per op.
cd "$(dirname "$0")/../.."
RPID=$(pgrep -f "redis-server.*:6379" | head -1)
rcpu() { awk '{print $14+$15}' /proc/$RPID/stat; }
for r in $(seq 1 $1); do
 for cmd in $2; do
  order="${A:-base} ${B:-lane2}"; [ $((r % 2)) = 0 ] && order="${B:-lane2} ${A:-base}"
  for b in $order; do
   out=$(mktemp -d)
   s0=$(rcpu)
   /usr/bin/time -f "%U %S" -o $out/t /tmp/cl-$b run benches/redis/parity.toml --quiet --strategy parity-$cmd --workers 16 --ops 2000000 --set workload.redis_batch=16 --out $out >/dev/null 2>&1
   s1=$(rcpu)
   python3 -c "
import json,sys
s=json.load(open('$out/report.json'))['strategies'][0]
u,sy=open('$out/t').read().split()
print('$r $cmd $b', round(s['throughput_ops_per_s']), s['check']['verdict'], 'cl_load_us_op=%.3f'%s.get('client_cpu_us_per_op'), 'cl_total_s=%.2f'%(float(u)+float(sy)), 'redis_us_op=%.3f'%(($s1-$s0)*10000/2e6))
"
   rm -rf $out
  done
 done
done
