-- Run once after the bulk insert: the index mark_all_read and the check use, and fresh
-- statistics. AUTO_INCREMENT already follows the largest seeded id.

CREATE INDEX notifications_user_read ON notifications (user_id, is_read);
ANALYZE TABLE notifications, unread_counts;
