-- pgbench twin of counterlab's writable-cte mark_read on the seeded layout (user u owns
-- ids (u-1)*100+1 ..= u*100): the one statement cte_mark_read sends, in autocommit (no
-- BEGIN/END), so one round trip per op on both sides.
\set uid random(1, 10000)
\set id (:uid - 1) * 100 + random(1, 100)
WITH r AS (UPDATE notifications SET is_read = true WHERE id = :id AND user_id = :uid AND NOT is_read RETURNING 1), c AS (UPDATE unread_counts SET unread = unread - 1 WHERE user_id = :uid AND EXISTS (SELECT 1 FROM r)) SELECT count(*) FROM r;
