#!/bin/bash
# redis-benchmark GET -P 16 -c 16 -r 10000 over long (counterlab-shaped) vs short prefixes
L="cl:cl_20261206t145301_abcd_lt_rc_parity_get:c:"
S="cl:0123456789ab:c:"
for p in "$L" "$S"; do
  python3 -c "
import sys
p=sys.argv[1]
for i in range(10000): print(f'SET {p}{i:012d} 1')" "$p" | redis-cli > /dev/null
done
for r in 1 2 3 4; do
  for p in "$L" "$S"; do
    redis-cli CONFIG RESETSTAT >/dev/null
    rps=$(redis-benchmark -c 16 -P 16 -n 3000000 -r 10000 -q GET "${p}__rand_int__" | tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1)
    us=$(redis-cli INFO commandstats | grep cmdstat_get: | sed 's/.*usec_per_call=\([0-9.]*\).*/\1/')
    echo "len=${#p} $rps get_usec_per_call=$us load=$(cut -d' ' -f1 /proc/loadavg)"
  done
done
redis-cli --scan --pattern 'cl:cl_20261206t145301_abcd*' | xargs -n 500 redis-cli UNLINK >/dev/null
redis-cli --scan --pattern 'cl:0123456789ab:*' | xargs -n 500 redis-cli UNLINK >/dev/null
