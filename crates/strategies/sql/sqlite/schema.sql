-- counterlab SQLite schema, in the run's own database file (one file per namespace).
-- WAL (set by the connection options: the namespace's authorizer refuses PRAGMAs) lets
-- readers run beside the single writer; keys come with the tables (INTEGER PRIMARY KEY
-- is the rowid), the secondary index after the seed. AUTOINCREMENT: a notification id is
-- never given again after its row is deleted (a plain rowid reuses the largest one), as
-- PostgreSQL's and MariaDB's ids are not, and as the checker's row facts assume
-- (core/history/rows.rs).

CREATE TABLE notifications (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id    INTEGER NOT NULL,
    is_read    BOOLEAN NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
);

CREATE TABLE unread_counts (
    user_id INTEGER PRIMARY KEY,
    unread  INTEGER NOT NULL
);

-- Flush claims applied by zset-buffer-durable: the idempotence record of its write-back.
CREATE TABLE flush_claims (
    claim_id INTEGER PRIMARY KEY
);

-- Broker message ids applied by mq-consumer-idempotent's consumer: its idempotence record.
CREATE TABLE processed_messages (
    message_id INTEGER PRIMARY KEY
);
