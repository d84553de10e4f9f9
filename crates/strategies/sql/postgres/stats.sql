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
