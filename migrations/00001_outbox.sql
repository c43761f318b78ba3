-- +goose Up
-- The outbox: applications insert one row per event in the same transaction
-- as their business change. walpost reads the inserts from the WAL.
-- walpost:outbox-table begin (left out when the outbox is the user's: migrations.Names.UserOutbox)
CREATE TABLE IF NOT EXISTS outbox (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    idempotency_key text NOT NULL UNIQUE,
    payload         jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz,
    attempts        int NOT NULL DEFAULT 0,
    last_error      text,
    topic           text,
    partition_key   text,
    event_type      text,
    headers         jsonb
);
-- walpost:outbox-table end

-- Records Kafka keeps refusing land here, never dropped and never deleted.
CREATE TABLE IF NOT EXISTS poison_outbox (
    idempotency_key text PRIMARY KEY,
    outbox_id       uuid,
    payload         jsonb,
    created_at      timestamptz NOT NULL,
    topic           text NOT NULL,
    partition_key   text,
    event_type      text,
    headers         jsonb,
    attempts        int NOT NULL,
    last_error      text NOT NULL,
    error_class     text NOT NULL,
    commit_lsn      pg_lsn NOT NULL,
    poisoned_at     timestamptz NOT NULL DEFAULT now(),
    replayed_at     timestamptz,
    replay_count    int NOT NULL DEFAULT 0
);

CREATE INDEX IF NOT EXISTS poison_outbox_created_at ON poison_outbox (created_at);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION poison_outbox_refuse_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'rows of % are never deleted: they are the only trace of a quarantined event', TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'replay the row with "walpost poison replay --key KEY"; replayed rows keep replayed_at and replay_count as their audit trail';
END;
$$;
-- +goose StatementEnd

DROP TRIGGER IF EXISTS poison_outbox_no_delete ON poison_outbox;
CREATE TRIGGER poison_outbox_no_delete
    BEFORE DELETE ON poison_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION poison_outbox_refuse_delete();

DROP TRIGGER IF EXISTS poison_outbox_no_truncate ON poison_outbox;
CREATE TRIGGER poison_outbox_no_truncate
    BEFORE TRUNCATE ON poison_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION poison_outbox_refuse_delete();

-- The publication covers exactly the outbox and only its inserts. It must
-- exist before the replication slot is created.
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'walpost_outbox') THEN
        CREATE PUBLICATION walpost_outbox FOR TABLE outbox WITH (publish = 'insert');
    END IF;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- Down migrations are intentionally not provided: dropping the outbox or the
-- quarantine would lose events.
SELECT 1;
