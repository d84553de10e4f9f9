#!/usr/bin/env bash
# The README's test command: every test of the workspace (the crates' unit tests and the
# integration suite, all of them even when some fail), then the tests that were skipped
# because a server they need did not answer (tests/it/util.rs `require!`), named with
# the reason and counted. Extra arguments go to `cargo test` (e.g. --locked).
# COUNTERLAB_REQUIRE_SERVERS=1 (set by .ci/run) makes a missing server fail its test.
# The topologies the suite starts (scripts/topologies/pg-standby.sh, redis-replica.sh and
# pg-statements.sh, private ports) are stopped afterwards when they were not running
# before; ones that were (CI starts them first) are left running, and the last lines say which.
# Exit status: cargo's (0 only when nothing failed; skipped tests are not failures).
set -uo pipefail
cd "$(dirname "$0")/.."

target=${CARGO_TARGET_DIR:-target}
skipped="$target/counterlab-skipped.txt"
mkdir -p "$target"
: > "$skipped"

topologies="pg-standby redis-replica pg-statements"
running_before=""
for t in $topologies; do
  if scripts/topologies/$t.sh status >/dev/null 2>&1; then running_before="$running_before $t"; fi
done

cargo test --workspace --no-fail-fast "$@"
status=$?

for t in $topologies; do
  if [[ " $running_before " == *" $t "* ]]; then
    echo "test.sh: left running, as it was before: scripts/topologies/$t.sh (stop: scripts/topologies/$t.sh stop)"
  elif scripts/topologies/$t.sh status >/dev/null 2>&1; then
    scripts/topologies/$t.sh stop >/dev/null 2>&1 && echo "test.sh: stopped scripts/topologies/$t.sh, which the tests started"
  fi
done

# Containers the suite started (only where a Docker engine answered) go with it.
if command -v docker >/dev/null 2>&1 && ids=$(docker ps -aq --filter label=org.counterlab.run=tests 2>/dev/null) \
  && [ -n "$ids" ]; then
  docker rm -f $ids >/dev/null && echo "test.sh: removed the suite's containers"
fi

count=$(grep -c '^SKIPPED ' "$skipped" || true)
echo
if [ "$count" -eq 0 ]; then
  echo "test.sh: no test skipped (every server a test needs answered)"
else
  echo "test.sh: $count test(s) SKIPPED, not passed: a server they need did not answer"
  sort "$skipped" | sed 's/^/  /'
  echo "test.sh: start the servers (docker compose up -d --wait, or .ci/run), or set COUNTERLAB_*_URL"
fi
echo "test.sh: cargo test exited $status"
exit "$status"
