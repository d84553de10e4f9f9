//! The one integration-test binary. Every test talks to the real PostgreSQL named by
//! COUNTERLAB_POSTGRES_URL (else the local default) and asserts on what is stored there.

/// Helpers shared by the modules below: connecting, planning, direct SQL inspection.
mod util;

/// Each strategy run sequentially: return values and rows/counters after every op.
mod sequential;

/// writable-cte's single statements, its snapshot mutant under a forced interleaving,
/// and the connection a closed-loop worker holds.
mod single;

/// The duplicate mark_read race at small size, judged on the rows in the database.
mod race;

/// The checker on real data: a counter changed behind the strategy's back is caught.
mod checker;

/// Strategy x backend x isolation findings, and the embedded SQLite fallback.
mod matrix;

/// Redis strategies: convergence, flusher crash, data loss and the reconciler.
mod redis;

/// Redis Cluster: the Redis designs' verdicts as on one server, nothing left on any
/// node; the failover fault on a private cluster.
mod cluster;

/// Every built-in's and strategy file's worker loop holds a connection of its own.
mod held;

/// watch-multi, redis-hash and redis-set on PostgreSQL, MariaDB and SQLite: exact, and
/// nothing left behind.
mod redis_designs;

/// Broker strategies (RabbitMQ): the consumer crash after an apply, doubled or skipped
/// redeliveries, and the queue gone after the run, on every SQL backend.
mod mq;

/// Scenario files: every shipped scenario runs at small size; bad input is located.
mod scenarios;

/// The distributed phases: prepare, four agents, check, teardown; the merge, a zoo
/// mutant across agents, a skewed agent clock, bad handles and outputs.
mod distributed;

/// `--junit` (schema-valid, failing the rows the exit code fails) and GitHub annotations.
mod junit;

/// A strategy file's Redis keys capped per value and per namespace.
mod caps;

/// Every phase around the load bounded in time: over it, INCOMPLETE naming the phase.
mod deadlines;

/// The binary: exit codes, redacted URLs, report files, and namespace hygiene.
mod cli;

/// `init`'s files validated and run, `validate`'s located errors and clean servers, and
/// `list`'s designs and mutants.
mod init;

/// The run as it runs: the live view in 80 columns (tmux), plain lines, --json,
/// --metrics-addr scraped mid-run, --set, ${VAR} and the conventional URL variables.
mod live;

/// The HTML report, rendered by headless Chromium.
mod html;

/// Open loop: coordinated omission, rate tracking, HDR logs, `compare`.
mod openloop;

/// `--repeat` and `compare` against the measured noise: same build, injected slowdown.
mod compare;

/// File-defined strategies: twins, a caught racy file, the slotted counter, validation.
mod custom;

/// Servers on demand: docker-compose.yml against the container specs, `--servers`, and
/// a run on throwaway containers where a Docker engine answers.
mod servers;

/// The distributed phases' deployment: the Kubernetes manifests and the compose `agents`
/// profile against the CLI contract, and the agents' segment claims run in a shell.
mod deploy;

/// Repository hygiene: doc lines, function length, import cycles, descriptions.
mod tidy;

/// The committed reports load into the typed row and render.
mod reports;

/// Generated concurrent cases against the real servers, shrunk and replayed.
mod props;

/// The bug zoo as a gate: a miss and a false positive both fail it, with the replay.
mod zoo;

/// Escape attempts against each namespace's own identity (role, user, ACL user,
/// authorizer): refused by the servers, sentinels unchanged.
mod sandbox;

/// The servers' own bounds on a namespace's identity: runaway statements end on the
/// server at the op timeout; teardown ends the identity's sessions.
mod bounds;

/// One verdict in every output and the exit code: wrong reads, failing operations, no
/// evidence.
mod verdicts;

/// The registry: a test-only strategy added with one row runs like a built-in.
mod registry;

/// Servers failing under a run: SQL connections terminated during the load, settle and
/// the check, once and persistently; a private Redis restarted mid-load.
mod failures;

/// cache-aside: the delayed double delete and its delete-first mutant, on every SQL backend.
mod cache;

/// Replica reads on the local topologies: a paused standby and a paused Redis replica
/// give `stale_read` with its staleness, no write-path anomaly, nothing left behind.
mod replica;

/// `counterlab explore`: every interleaving of two ops' server calls on the real servers:
/// UNSAFE with a blocked step and a replayable schedule, SAFE designs, the bound's limit.
mod explore;

/// `StrategyReport.cost` against the servers' statistics read independently: WAL bytes,
/// updated and HOT rows, MariaDB row lock waits, Redis EVALSHA calls.
mod cost;

/// The server settled after the seed, before the load: a PostgreSQL checkpoint, MariaDB's
/// flush for export, an SQLite WAL checkpoint, each seen on the server.
mod settle;

/// `counterlab capacity`: a knee found and verified (0.8x holds, 1.25x fails) on SQLite and
/// PostgreSQL over a design whose ceiling is fixed by construction; the binary's files,
/// exit codes and located bad input.
mod capacity;
