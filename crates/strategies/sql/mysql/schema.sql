-- counterlab MySQL/MariaDB schema, created in the run's own database (one per namespace).
-- InnoDB, primary keys from the start (the clustered index is loaded in key order);
-- secondary indexes come after the seed.

CREATE TABLE notifications (
    id         BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    user_id    BIGINT NOT NULL,
    is_read    BOOLEAN NOT NULL DEFAULT FALSE,
    created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE = InnoDB;

CREATE TABLE unread_counts (
    user_id BIGINT NOT NULL PRIMARY KEY,
    unread  BIGINT NOT NULL
) ENGINE = InnoDB;

-- Flush claims applied by zset-buffer-durable: the idempotence record of its write-back.
CREATE TABLE flush_claims (
    claim_id BIGINT NOT NULL PRIMARY KEY
) ENGINE = InnoDB;

-- Broker message ids applied by mq-consumer-idempotent's consumer: its idempotence record.
CREATE TABLE processed_messages (
    message_id BIGINT NOT NULL PRIMARY KEY
) ENGINE = InnoDB;
