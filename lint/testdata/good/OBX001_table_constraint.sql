CREATE TABLE outbox (
    id              bigint GENERATED ALWAYS AS IDENTITY,
    idempotency_key text,
    payload         jsonb NOT NULL,
    CONSTRAINT outbox_pk PRIMARY KEY (id),
    CONSTRAINT outbox_key UNIQUE (idempotency_key)
);
ALTER TABLE outbox ALTER COLUMN idempotency_key SET NOT NULL;
