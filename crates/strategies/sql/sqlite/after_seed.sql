-- Run once after the bulk insert: the partial index mark_all_read and the check use, and
-- fresh statistics.

CREATE INDEX notifications_user_unread ON notifications (user_id) WHERE NOT is_read;
ANALYZE;
