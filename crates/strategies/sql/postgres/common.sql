-- Statements shared by every SQL strategy on PostgreSQL. Each statement follows a
-- `-- name:` line; the Rust side looks them up by name and binds arguments in the order
-- given in the comment after the name (the same order in every dialect).

-- name: insert_notification  (user) -> id
INSERT INTO notifications (user_id) VALUES ($1) RETURNING id;

-- name: counter_increment  (user)
UPDATE unread_counts SET unread = unread + 1 WHERE user_id = $1;

-- name: counter_decrement  (user)
UPDATE unread_counts SET unread = unread - 1 WHERE user_id = $1;

-- name: counter_subtract  (n, user)
UPDATE unread_counts SET unread = unread - $1 WHERE user_id = $2;

-- name: counter_zero  (user)
UPDATE unread_counts SET unread = 0 WHERE user_id = $1;

-- name: counter_read  (user) -> unread
SELECT unread FROM unread_counts WHERE user_id = $1;

-- name: read_state  (id, user) -> is_read, without a lock
SELECT is_read FROM notifications WHERE id = $1 AND user_id = $2;

-- name: lock_one  (id, user) -> is_read, row locked until commit
SELECT is_read FROM notifications WHERE id = $1 AND user_id = $2 FOR UPDATE;

-- name: lock_unread  (user) -> ids, rows locked in id order
SELECT id FROM notifications WHERE user_id = $1 AND NOT is_read ORDER BY id FOR UPDATE;

-- name: set_read  (id, user): no guard, rows_affected counts matched rows
UPDATE notifications SET is_read = true WHERE id = $1 AND user_id = $2;

-- name: set_read_if_unread  (id, user): rows_affected is 1 only for a real transition
UPDATE notifications SET is_read = true WHERE id = $1 AND user_id = $2 AND NOT is_read;

-- name: delete_unread  (id, user)
DELETE FROM notifications WHERE id = $1 AND user_id = $2 AND NOT is_read;

-- name: delete_any  (id, user)
DELETE FROM notifications WHERE id = $1 AND user_id = $2;

-- name: mark_all_rows  (user)
UPDATE notifications SET is_read = true WHERE user_id = $1 AND NOT is_read;

-- Statements of the Redis strategies' SQL side.

-- name: counter_add  (n, user): a flushed delta
UPDATE unread_counts SET unread = unread + $1 WHERE user_id = $2;

-- Records a flush claim id in the same transaction as its counter change; affects 0 rows
-- when the claim was already applied, which makes replaying a claim harmless.
-- name: claim_record  (claim_id)
INSERT INTO flush_claims (claim_id) VALUES ($1) ON CONFLICT DO NOTHING;

-- Records a broker message id in the same transaction as its counter change; affects 0
-- rows when the message was applied before (a redelivery).
-- name: message_record  (message_id)
INSERT INTO processed_messages (message_id) VALUES ($1) ON CONFLICT DO NOTHING;

-- name: counters_all  () -> user_id, unread
SELECT user_id, unread FROM unread_counts;

-- name: truth_all  () -> user_id, unread rows
SELECT user_id, COUNT(*) FROM notifications WHERE NOT is_read GROUP BY user_id;

-- name: user_rows  (user) -> id, is_read
SELECT id, is_read FROM notifications WHERE user_id = $1 ORDER BY id;

-- The ground truth beside every counter (NULL: no counter row), for every user that has
-- a counter or an unread row, in no particular order, for `check_rows` (the tests' whole
-- list); the final check reads `truth_all` and `counters_all` apart in one snapshot. One
-- pass over the unread rows joined to the counters by hash, no sort and no UNION.
-- name: check_rows  () -> user_id, unread, truth
SELECT COALESCE(c.user_id, t.user_id) AS user_id, c.unread, COALESCE(t.truth, 0) AS truth
FROM unread_counts c
FULL JOIN (SELECT user_id, count(*) AS truth
           FROM notifications WHERE NOT is_read GROUP BY user_id) t ON t.user_id = c.user_id;

-- Sampled during a run (issue 5's drift series): one number, two aggregates.
-- name: net_drift  () -> sum of counters - unread rows
SELECT CAST((SELECT COALESCE(SUM(unread), 0) FROM unread_counts) - (SELECT COUNT(*) FROM notifications WHERE NOT is_read) AS bigint);

-- The distributed phases: the server clock, for each agent's clock offset.
-- name: server_time_us  () -> microseconds since the Unix epoch
SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS bigint);

-- The explorer (`counterlab explore`): how many of the namespace identity's sessions wait
-- on a lock right now (the lock manager's own queue, so a lock released by a COMMIT is
-- no longer waited on by the time the COMMIT returns).
-- name: lock_waiters  () -> sessions waiting on a lock
SELECT count(*) FROM pg_stat_activity WHERE usename = current_user AND cardinality(pg_blocking_pids(pid)) > 0;
