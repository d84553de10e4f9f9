-- Statements shared by every SQL strategy on MySQL/MariaDB. Each statement follows a
-- `-- name:` line; the Rust side looks them up by name and binds arguments in the order
-- given in the comment after the name (the same order in every dialect).

-- MySQL 8 has no INSERT ... RETURNING: the id is the statement's last_insert_id.
-- name: insert_notification  (user) -> id
INSERT INTO notifications (user_id) VALUES (?);

-- name: counter_increment  (user)
UPDATE unread_counts SET unread = unread + 1 WHERE user_id = ?;

-- name: counter_decrement  (user)
UPDATE unread_counts SET unread = unread - 1 WHERE user_id = ?;

-- name: counter_subtract  (n, user)
UPDATE unread_counts SET unread = unread - ? WHERE user_id = ?;

-- name: counter_zero  (user)
UPDATE unread_counts SET unread = 0 WHERE user_id = ?;

-- name: counter_read  (user) -> unread
SELECT unread FROM unread_counts WHERE user_id = ?;

-- name: read_state  (id, user) -> is_read, without a lock
SELECT is_read FROM notifications WHERE id = ? AND user_id = ?;

-- name: lock_one  (id, user) -> is_read, row locked until commit
SELECT is_read FROM notifications WHERE id = ? AND user_id = ? FOR UPDATE;

-- name: lock_unread  (user) -> ids, rows locked in id order
SELECT id FROM notifications WHERE user_id = ? AND NOT is_read ORDER BY id FOR UPDATE;

-- sqlx sets CLIENT_FOUND_ROWS: rows_affected counts rows matched, not changed.
-- name: set_read  (id, user): no guard, rows_affected counts matched rows
UPDATE notifications SET is_read = true WHERE id = ? AND user_id = ?;

-- name: set_read_if_unread  (id, user): rows_affected is 1 only for a real transition
UPDATE notifications SET is_read = true WHERE id = ? AND user_id = ? AND NOT is_read;

-- name: delete_unread  (id, user)
DELETE FROM notifications WHERE id = ? AND user_id = ? AND NOT is_read;

-- name: delete_any  (id, user)
DELETE FROM notifications WHERE id = ? AND user_id = ?;

-- name: mark_all_rows  (user)
UPDATE notifications SET is_read = true WHERE user_id = ? AND NOT is_read;

-- Statements of the Redis strategies' SQL side.

-- name: counter_add  (n, user): a flushed delta
UPDATE unread_counts SET unread = unread + ? WHERE user_id = ?;

-- Records a flush claim id in the same transaction as its counter change; affects 0 rows
-- when the claim was already applied, which makes replaying a claim harmless.
-- name: claim_record  (claim_id)
INSERT IGNORE INTO flush_claims (claim_id) VALUES (?);

-- Records a broker message id in the same transaction as its counter change; affects 0
-- rows when the message was applied before (a redelivery).
-- name: message_record  (message_id)
INSERT IGNORE INTO processed_messages (message_id) VALUES (?);

-- name: counters_all  () -> user_id, unread
SELECT user_id, unread FROM unread_counts;

-- name: truth_all  () -> user_id, unread rows
SELECT user_id, COUNT(*) FROM notifications WHERE NOT is_read GROUP BY user_id;

-- name: user_rows  (user) -> id, is_read
SELECT id, is_read FROM notifications WHERE user_id = ? ORDER BY id;

-- The ground truth beside every counter (NULL: no counter row), for every user that has
-- a counter or a notification; users with neither are filled in as (none, 0). Kept as
-- the reference shape: the check itself streams check_counts and check_truth merged
-- (every one-statement shape is a temporary table or a per-user subquery here).
-- name: check_rows  () -> user_id, unread, truth
SELECT u.user_id, c.unread, COALESCE(t.truth, 0) AS truth
FROM (SELECT user_id FROM unread_counts UNION SELECT user_id FROM notifications) u
LEFT JOIN unread_counts c ON c.user_id = u.user_id
LEFT JOIN (SELECT user_id, COUNT(*) AS truth
           FROM notifications WHERE NOT is_read GROUP BY user_id) t ON t.user_id = u.user_id
ORDER BY u.user_id;

-- The check's two streams, both in user order without a sort: the counters by primary
-- key, the truth along the (user_id, is_read) index (EXPLAIN: "Using where; Using index").
-- name: check_counts  () -> user_id, unread
SELECT user_id, unread FROM unread_counts ORDER BY user_id;

-- name: check_truth  () -> user_id, truth
SELECT user_id, COUNT(*) AS truth FROM notifications WHERE NOT is_read GROUP BY user_id ORDER BY user_id;

-- Sampled during a run (issue 5's drift series): one number, two aggregates.
-- name: net_drift  () -> sum of counters - unread rows
SELECT CAST((SELECT COALESCE(SUM(unread), 0) FROM unread_counts) - (SELECT COUNT(*) FROM notifications WHERE NOT is_read) AS SIGNED);

-- The distributed phases: the server clock, for each agent's clock offset.
-- name: server_time_us  () -> microseconds since the Unix epoch
SELECT CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED);

-- The explorer (`counterlab explore`): the InnoDB monitor's report, whose transaction list
-- says which sessions wait on a lock (`LOCK WAIT`) and whose they are. Run on the
-- configured account's pool (it needs the PROCESS privilege the namespace's user lacks).
-- name: lock_waiters  () -> Type, Name, Status
SHOW ENGINE INNODB STATUS;
