-- Run once after the bulk COPY: keys and indexes the workload needs, the identity sequence moved
-- past the seeded ids, and fresh planner statistics.

ALTER TABLE notifications ADD PRIMARY KEY (id);
ALTER TABLE unread_counts ADD PRIMARY KEY (user_id);
-- mark_all_read and the check look up a user's unread rows. No plain (user_id) index:
-- every extra index makes each mark_read (a non-HOT update) more expensive.
CREATE INDEX notifications_user_unread ON notifications (user_id) WHERE NOT is_read;
SELECT setval(pg_get_serial_sequence('notifications', 'id'),
              GREATEST((SELECT max(id) FROM notifications), 1));
ANALYZE notifications;
ANALYZE unread_counts;
