-- select-for-update: every operation is one transaction that locks the notification
-- rows it decides on before deciding. Lock order is always notification rows (ascending
-- id) then the counter row, so the strategy's own operations cannot deadlock.

-- name: lock_one
SELECT is_read FROM notifications WHERE id = $1 AND user_id = $2 FOR UPDATE;

-- name: set_read
UPDATE notifications SET is_read = true WHERE id = $1;

-- name: delete
DELETE FROM notifications WHERE id = $1;

-- name: lock_unread
SELECT id FROM notifications WHERE user_id = $1 AND NOT is_read ORDER BY id FOR UPDATE;

-- name: set_read_many
UPDATE notifications SET is_read = true WHERE id = ANY($1);
