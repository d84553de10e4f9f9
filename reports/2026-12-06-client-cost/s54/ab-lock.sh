#!/usr/bin/env bash
# A/B: the lock-wait sampler on (A, main's build) against effectively off (B: the same
# build with LOCK_SAMPLE = 1 h), writable-cte at 64 workers, TLS (the default), rounds
# alternating which binary goes first. Binaries /tmp/cl-base and /tmp/cl-nolock.
# Usage: ab-lock.sh OUT ROUNDS [STRATEGY] [WORKERS]
set -euo pipefail
out=$1; rounds=$2; strategy=${3:-writable-cte}; workers=${4:-64}
mkdir -p "$out"
log="$out/ab.log"
echo "# $(date -u +%FT%TZ) $strategy $workers workers; $(uptime)" >> "$log"
one() {
  local bin=$1 tag=$2 r=$3 dir
  dir=$(mktemp -d)
  "$bin" run benches/pgbench/mark-read.toml --quiet --strategy "$strategy" --workers "$workers" --duration-s 10 --out "$dir" > /dev/null
  python3 - "$dir/report.json" "$tag" "$r" <<'PY' | tee -a "$log"
import json, sys
s = json.load(open(sys.argv[1]))["strategies"][0]
load = open("/proc/loadavg").read().split()[0]
print(f"round {sys.argv[3]} {sys.argv[2]} {s['throughput_ops_per_s']:.0f} ops/s {s['client_cpu_us_per_op']:.1f} us/op {s['check']['verdict']} load {load}")
PY
  rm -rf "$dir"
}
for r in $(seq 1 "$rounds"); do
  if (( r % 2 )); then one /tmp/cl-base on "$r"; one /tmp/cl-nolock off "$r"
  else one /tmp/cl-nolock off "$r"; one /tmp/cl-base on "$r"; fi
done
