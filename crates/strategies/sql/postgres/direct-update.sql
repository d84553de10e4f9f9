-- direct-update: the seed design's first version. Every statement autocommits; the
-- application reads is_read, decides, then writes. Two requests that both read "unread"
-- both decrement: the classic double decrement.

-- name: read_state
SELECT is_read FROM notifications WHERE id = $1 AND user_id = $2;

-- name: set_read
UPDATE notifications SET is_read = true WHERE id = $1 AND user_id = $2;

-- name: delete
DELETE FROM notifications WHERE id = $1 AND user_id = $2;

-- name: mark_all_rows
UPDATE notifications SET is_read = true WHERE user_id = $1 AND NOT is_read;

-- A create that lands between the two statements of mark_all_read is wiped here.
-- name: counter_zero
UPDATE unread_counts SET unread = 0 WHERE user_id = $1;
