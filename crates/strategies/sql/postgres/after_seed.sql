-- Run once after the bulk COPY: indexes the workload needs, the identity sequence moved
-- past the seeded ids, and fresh planner statistics.

CREATE INDEX notifications_user_unread ON notifications (user_id) WHERE NOT is_read;
CREATE INDEX notifications_user ON notifications (user_id);
SELECT setval(pg_get_serial_sequence('notifications', 'id'),
              GREATEST((SELECT max(id) FROM notifications), 1));
ANALYZE notifications;
ANALYZE unread_counts;
