-- Statements shared by every SQL strategy on PostgreSQL. Each statement starts with a
-- `-- name:` line; the Rust side looks them up by name.

-- name: insert_notification
INSERT INTO notifications (user_id) VALUES ($1) RETURNING id;

-- name: counter_increment
UPDATE unread_counts SET unread = unread + 1 WHERE user_id = $1;

-- name: counter_decrement
UPDATE unread_counts SET unread = unread - 1 WHERE user_id = $1;

-- name: counter_subtract
UPDATE unread_counts SET unread = unread - $2 WHERE user_id = $1;

-- name: counter_read
SELECT unread FROM unread_counts WHERE user_id = $1;

-- The ground truth beside every user's counter (NULL: no counter row). Users are
-- numbered 1..=$1; the join keeps users whose rows were all deleted.
-- name: check_rows
SELECT u.user_id, c.unread, COALESCE(t.truth, 0) AS truth
FROM generate_series(1, $1::bigint) AS u(user_id)
LEFT JOIN unread_counts c ON c.user_id = u.user_id
LEFT JOIN (SELECT user_id, count(*) AS truth
           FROM notifications WHERE NOT is_read GROUP BY user_id) t ON t.user_id = u.user_id
ORDER BY u.user_id;

-- Rows the check would miss: notifications or counters of users outside 1..=$1.
-- name: stray_rows
SELECT (SELECT count(*) FROM notifications WHERE user_id < 1 OR user_id > $1)
     + (SELECT count(*) FROM unread_counts WHERE user_id < 1 OR user_id > $1);
