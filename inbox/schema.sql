-- The inbox's state (package github.com/walpost/walpost/inbox). Apply it
-- with inbox.Migrate or by hand; the tables are created in the first
-- schema of the search_path, where the inbox's statements find them.
-- Idempotent: every statement may run again.

-- One row per consumer group and partition: the commit LSN of the last
-- transaction applied from walpost's first sends, the idempotency keys
-- applied at exactly that LSN (at most one transaction's records of the
-- partition), and the Kafka offset after the last record handled. Never
-- pruned; delete a group's rows only when the group is retired.
CREATE TABLE IF NOT EXISTS inbox_watermark (
    consumer_group text        NOT NULL,
    topic          text        NOT NULL,
    partition      int         NOT NULL,
    commit_lsn     pg_lsn      NOT NULL DEFAULT '0/0',
    keys           text[]      NOT NULL DEFAULT '{}',
    next_offset    bigint      NOT NULL DEFAULT -1,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, topic, partition)
);

-- One row per record the watermark cannot decide (replayed from poison,
-- recovered, or without walpost's commit_lsn header), and with
-- Config.KeyEveryEvent per applied record. Pruned after Config.KeepFor.
CREATE TABLE IF NOT EXISTS inbox_key (
    consumer_group  text        NOT NULL,
    topic           text        NOT NULL,
    idempotency_key text        NOT NULL,
    applied_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, topic, idempotency_key)
);

CREATE INDEX IF NOT EXISTS inbox_key_applied_at ON inbox_key (consumer_group, applied_at);
