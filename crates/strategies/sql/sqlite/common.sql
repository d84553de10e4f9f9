-- Statements shared by every SQL strategy on SQLite. Each statement follows a
-- `-- name:` line; the Rust side looks them up by name and binds arguments in the order
-- given in the comment after the name (the same order in every dialect).

-- name: insert_notification  (user) -> id
INSERT INTO notifications (user_id) VALUES (?1) RETURNING id;

-- name: counter_increment  (user)
UPDATE unread_counts SET unread = unread + 1 WHERE user_id = ?1;

-- name: counter_decrement  (user)
UPDATE unread_counts SET unread = unread - 1 WHERE user_id = ?1;

-- name: counter_subtract  (n, user)
UPDATE unread_counts SET unread = unread - ?1 WHERE user_id = ?2;

-- name: counter_zero  (user)
UPDATE unread_counts SET unread = 0 WHERE user_id = ?1;

-- name: counter_read  (user) -> unread
SELECT unread FROM unread_counts WHERE user_id = ?1;

-- name: read_state  (id, user) -> is_read, without a lock
SELECT is_read FROM notifications WHERE id = ?1 AND user_id = ?2;

-- SQLite has no row locks: select-for-update opens its transactions with BEGIN
-- IMMEDIATE (the database write lock), so a plain read under it is already exclusive.
-- name: lock_one  (id, user) -> is_read, under BEGIN IMMEDIATE
SELECT is_read FROM notifications WHERE id = ?1 AND user_id = ?2;

-- name: lock_unread  (user) -> ids, under BEGIN IMMEDIATE
SELECT id FROM notifications WHERE user_id = ?1 AND NOT is_read ORDER BY id;

-- name: set_read  (id, user): no guard, rows_affected counts matched rows
UPDATE notifications SET is_read = 1 WHERE id = ?1 AND user_id = ?2;

-- name: set_read_if_unread  (id, user): rows_affected is 1 only for a real transition
UPDATE notifications SET is_read = 1 WHERE id = ?1 AND user_id = ?2 AND NOT is_read;

-- name: delete_unread  (id, user)
DELETE FROM notifications WHERE id = ?1 AND user_id = ?2 AND NOT is_read;

-- name: delete_any  (id, user)
DELETE FROM notifications WHERE id = ?1 AND user_id = ?2;

-- name: mark_all_rows  (user)
UPDATE notifications SET is_read = 1 WHERE user_id = ?1 AND NOT is_read;

-- Statements of the Redis strategies' SQL side.

-- name: counter_add  (n, user): a flushed delta
UPDATE unread_counts SET unread = unread + ?1 WHERE user_id = ?2;

-- Records a flush claim id in the same transaction as its counter change; affects 0 rows
-- when the claim was already applied, which makes replaying a claim harmless.
-- name: claim_record  (claim_id)
INSERT OR IGNORE INTO flush_claims (claim_id) VALUES (?1);

-- Records a broker message id in the same transaction as its counter change; affects 0
-- rows when the message was applied before (a redelivery).
-- name: message_record  (message_id)
INSERT OR IGNORE INTO processed_messages (message_id) VALUES (?1);

-- name: counters_all  () -> user_id, unread
SELECT user_id, unread FROM unread_counts;

-- name: truth_all  () -> user_id, unread rows
SELECT user_id, COUNT(*) FROM notifications WHERE NOT is_read GROUP BY user_id;

-- The final check as two streams in user order, merged by the tool (backend/merge.rs):
-- the counters by primary key, the truth along the partial index of unread rows; neither
-- plan sorts or builds a temporary b-tree.
-- name: check_counts  () -> user_id, unread
SELECT user_id, unread FROM unread_counts ORDER BY user_id;

-- name: check_truth  () -> user_id, truth
SELECT user_id, COUNT(*) AS truth FROM notifications WHERE NOT is_read GROUP BY user_id ORDER BY user_id;

-- name: user_rows  (user) -> id, is_read
SELECT id, is_read FROM notifications WHERE user_id = ?1 ORDER BY id;

-- The ground truth beside every counter (NULL: no counter row), for every user that has
-- a counter or a notification; users with neither are filled in as (none, 0). Kept as
-- the reference shape: the check itself streams check_counts and check_truth merged
-- (this plan builds three temporary b-trees over every row: reports/2026-12-06-parity).
-- name: check_rows  () -> user_id, unread, truth
SELECT u.user_id, c.unread, COALESCE(t.truth, 0) AS truth
FROM (SELECT user_id FROM unread_counts UNION SELECT user_id FROM notifications) u
LEFT JOIN unread_counts c ON c.user_id = u.user_id
LEFT JOIN (SELECT user_id, count(*) AS truth
           FROM notifications WHERE NOT is_read GROUP BY user_id) t ON t.user_id = u.user_id
ORDER BY u.user_id;

-- Sampled during a run (issue 5's drift series): one number, two aggregates.
-- name: net_drift  () -> sum of counters - unread rows
SELECT (SELECT COALESCE(SUM(unread), 0) FROM unread_counts) - (SELECT COUNT(*) FROM notifications WHERE NOT is_read);

-- The distributed phases: the server clock, for each agent's clock offset.
-- name: server_time_us  () -> microseconds since the Unix epoch
SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER);

-- The explorer (`counterlab explore`) asks who waits on a lock: SQLite shows no one's lock
-- waits, so the explorer never runs this and times the write lock's waits instead.
-- name: lock_waiters  () -> nothing to say
SELECT NULL;
