-- Server-side statistics around a cell's load (`StrategyReport.cost`, docs/report.md).
-- Each reading returns (counter, value) rows under the server's own names; they are read
-- on the configured account's pool once `flush` has run on every connection that did
-- the namespace's work (crates/strategies/src/backend/stats.rs says why).

-- name: flush  (): this backend's pending statistics go to shared memory as it goes idle
SELECT pg_stat_force_next_flush();

-- name: tables  (schema) -> (counter, value): the namespace's tables, summed
SELECT x.counter, x.value
FROM (
    SELECT COALESCE(sum(n_tup_ins), 0)::bigint AS ins, COALESCE(sum(n_tup_upd), 0)::bigint AS upd,
           COALESCE(sum(n_tup_hot_upd), 0)::bigint AS hot, COALESCE(sum(n_tup_del), 0)::bigint AS del,
           COALESCE(sum(n_live_tup), 0)::bigint AS live, COALESCE(sum(n_dead_tup), 0)::bigint AS dead
    FROM pg_stat_user_tables WHERE schemaname = $1
) t
CROSS JOIN LATERAL (VALUES ('n_tup_ins', t.ins), ('n_tup_upd', t.upd), ('n_tup_hot_upd', t.hot),
    ('n_tup_del', t.del), ('n_live_tup', t.live), ('n_dead_tup', t.dead)) AS x(counter, value)
UNION ALL
SELECT x.counter, x.value
FROM (
    SELECT COALESCE(sum(heap_blks_read), 0)::bigint AS hr, COALESCE(sum(heap_blks_hit), 0)::bigint AS hh,
           COALESCE(sum(idx_blks_read), 0)::bigint AS ir, COALESCE(sum(idx_blks_hit), 0)::bigint AS ih
    FROM pg_statio_user_tables WHERE schemaname = $1
) b
CROSS JOIN LATERAL (VALUES ('heap_blks_read', b.hr), ('heap_blks_hit', b.hh), ('idx_blks_read', b.ir),
    ('idx_blks_hit', b.ih)) AS x(counter, value);

-- name: wal  () -> (counter, value): the whole server's WAL and its insert position in bytes
SELECT x.counter, x.value
FROM pg_stat_wal w
CROSS JOIN LATERAL (VALUES ('wal_records', w.wal_records), ('wal_fpi', w.wal_fpi),
    ('wal_bytes', w.wal_bytes::bigint),
    ('lsn_bytes', (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint)) AS x(counter, value);

-- The identity's backends at one instant (`lock_waits`, sampled through the load): how many
-- wait on a heavyweight lock (wait_event_type 'Lock': a row's transaction, a tuple, a
-- relation), how many are active, and whether this account sees other users' wait events
-- at all (a superuser or a member of pg_read_all_stats; else they read as none).

-- name: lock_waits  (user) -> (counter, value)
SELECT 'waiting', count(*) FILTER (WHERE wait_event_type = 'Lock')::bigint FROM pg_stat_activity WHERE usename = $1
UNION ALL
SELECT 'active', count(*) FILTER (WHERE state = 'active')::bigint FROM pg_stat_activity WHERE usename = $1
UNION ALL
SELECT 'visible', (pg_has_role(current_user, 'pg_read_all_stats', 'MEMBER')
    OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user))::int::bigint;

-- name: statements_loaded  () -> (loaded): 1 when shared_preload_libraries names pg_stat_statements
SELECT (current_setting('shared_preload_libraries') ~ '(^|[ ,])pg_stat_statements($|[ ,])')::int::bigint;

-- name: statements  (user) -> (queryid, query, counter, value): the identity's statements in pg_stat_statements (where it is loaded and created), a row per statement and counter
SELECT s.queryid::text, left(regexp_replace(s.query, '\s+', ' ', 'g'), 160), x.counter, x.value
FROM pg_stat_statements s
CROSS JOIN LATERAL (VALUES ('calls', s.calls), ('exec_us', (s.total_exec_time * 1000)::bigint), ('rows', s.rows),
    ('blks_hit', s.shared_blks_hit), ('blks_read', s.shared_blks_read), ('wal_bytes', s.wal_bytes::bigint))
    AS x(counter, value)
WHERE s.userid = (SELECT oid FROM pg_roles WHERE rolname = $1) AND s.queryid IS NOT NULL;
