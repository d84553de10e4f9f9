-- conditional-update: the state change itself is the check. Under READ COMMITTED a
-- blocked UPDATE re-evaluates its WHERE against the committed row version, so of two
-- concurrent mark_reads exactly one sees a changed row; the counter moves by what
-- really changed, in the same transaction.

-- name: set_read_if_unread
UPDATE notifications SET is_read = true WHERE id = $1 AND user_id = $2 AND NOT is_read;

-- name: delete_returning
DELETE FROM notifications WHERE id = $1 AND user_id = $2 RETURNING is_read;

-- name: mark_all_rows
UPDATE notifications SET is_read = true WHERE user_id = $1 AND NOT is_read;
