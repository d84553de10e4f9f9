#!/usr/bin/env bash
# Peak RSS (/usr/bin/time %M) of one Redis design's run at 1M users x 2 rows, the binary
# before UserCounters (/tmp/counterlab-before: a release build of 3eaab82) against the one
# after (/tmp/counterlab-after: 22240ef), alternating. Usage: run.sh > result.txt
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p /tmp/mem
for round in 1 2; do
  for s in redis-counter zset-buffer-durable; do
    for b in before after; do
      out=/tmp/mem/$b-$s-$round
      /usr/bin/time -f "%M" -o "$out.rss" "/tmp/counterlab-$b" run "$HERE/scenario.toml" --quiet \
        --set "strategies=[\"$s\"]" --out "$out" > "$out.log" 2>&1
      v=$(python3 -c "import json;s=json.load(open('$out/report.json'))['strategies'][0];print(s['check']['verdict'], s['check']['users_checked'])")
      echo "round $round $s $b rss_kb $(cat "$out.rss") $v"
    done
  done
done
