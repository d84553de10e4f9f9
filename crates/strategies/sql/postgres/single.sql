-- The single-statement designs on PostgreSQL (writable-cte and its mutant): each op is
-- one statement, data-modifying CTEs that change the rows and move the counter by what
-- the row change RETURNed, run in autocommit (no BEGIN, no COMMIT). The main query
-- reads the row change first, so every op locks the notification row(s) before the
-- counter row, as the two-statement designs do. MariaDB/MySQL and SQLite have no
-- data-modifying CTEs: the design is listed as unsupported there.

-- name: cte_create  (user) -> id
WITH n AS (INSERT INTO notifications (user_id) VALUES ($1) RETURNING id),
     c AS (UPDATE unread_counts SET unread = unread + 1 WHERE user_id = $1)
SELECT id FROM n;

-- name: cte_mark_read  (id, user) -> rows changed (0 or 1)
WITH r AS (UPDATE notifications SET is_read = true
           WHERE id = $1 AND user_id = $2 AND NOT is_read RETURNING 1),
     c AS (UPDATE unread_counts SET unread = unread - 1
           WHERE user_id = $2 AND EXISTS (SELECT 1 FROM r))
SELECT count(*) FROM r;

-- The mutant: the counter's guard and the reply ask the table instead of the UPDATE.
-- Every part of a statement sees one snapshot, taken before the UPDATE waited for a
-- concurrent mark_read's row lock: that one's change is not in it, the row still looks
-- unread, so the counter drops twice for one transition and both calls claim it. (The
-- FROM reads r, so the row lock is still taken before the counter's.)
-- name: cte_mark_read_snapshot  (id, user) -> rows changed, as the snapshot has it
WITH r AS (UPDATE notifications SET is_read = true
           WHERE id = $1 AND user_id = $2 AND NOT is_read RETURNING 1),
     c AS (UPDATE unread_counts SET unread = unread - 1
           WHERE user_id = $2
             AND EXISTS (SELECT 1 FROM notifications WHERE id = $1 AND user_id = $2 AND NOT is_read))
SELECT (SELECT count(*) FROM notifications WHERE id = $1 AND user_id = $2 AND NOT is_read)
FROM (SELECT count(*) FROM r) AS changed;

-- RETURNING gives the row as deleted: after waiting for a concurrent mark_read, its
-- new version (is_read true), so the counter drops only for an unread row.
-- name: cte_delete  (id, user) -> rows deleted (0 or 1)
WITH d AS (DELETE FROM notifications WHERE id = $1 AND user_id = $2 RETURNING is_read),
     c AS (UPDATE unread_counts SET unread = unread - 1
           WHERE user_id = $2 AND EXISTS (SELECT 1 FROM d WHERE NOT is_read))
SELECT count(*) FROM d;

-- name: cte_mark_all_read  (user) -> rows changed
WITH r AS (UPDATE notifications SET is_read = true
           WHERE user_id = $1 AND NOT is_read RETURNING 1),
     c AS (UPDATE unread_counts SET unread = unread - (SELECT count(*) FROM r)
           WHERE user_id = $1 AND EXISTS (SELECT 1 FROM r))
SELECT count(*) FROM r;
