#!/usr/bin/env bash
# Kept as it ran (paths are the session's: a clone of main in /tmp/hogclone, logs in /tmp/hog6).
# Issue 35 criterion: scripts/test.sh 3x in a row under two `yes` hogs, on /work/main at HEAD.
cd /tmp/hogclone
out=/tmp/hog6; mkdir -p $out
for t in pg-standby redis-replica pg-statements redis-cluster; do scripts/topologies/$t.sh start >/dev/null 2>&1; done
yes > /dev/null & h1=$!
yes > /dev/null & h2=$!
trap 'kill $h1 $h2 2>/dev/null' EXIT
( while sleep 30; do echo "$(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)"; done ) > $out/load.log 2>&1 & lw=$!
for i in 1 2 3; do
  s=$(date +%s)
  echo "run $i start $(date -u +%T) $(git rev-parse --short HEAD)" >> $out/summary
  COUNTERLAB_REQUIRE_SERVERS=1 timeout 2400 scripts/test.sh --locked > $out/run$i.log 2>&1
  rc=$?
  echo "run $i rc=$rc $(( $(date +%s) - s )) s end $(date -u +%T)" >> $out/summary
  grep -E "^test result|FAILED|panicked" $out/run$i.log | grep -v "ok\. " | head -20 >> $out/summary
  [ $rc -ne 0 ] && break
done
kill $lw
echo done >> $out/summary
