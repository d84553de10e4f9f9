-- pgbench twin of counterlab's conditional-update mark_read on the seeded layout
-- (user u owns ids (u-1)*100+1 ..= u*100): one transaction, the guarded UPDATE, and the
-- counter decrement only when a row really changed. Same statements, same round trips.
\set uid random(1, 10000)
\set id (:uid - 1) * 100 + random(1, 100)
BEGIN;
WITH c AS (UPDATE notifications SET is_read = true WHERE id = :id AND user_id = :uid AND NOT is_read RETURNING 1) SELECT count(*) AS changed FROM c \gset
\if :changed
UPDATE unread_counts SET unread = unread - 1 WHERE user_id = :uid;
\endif
END;
