CREATE TABLE outbox (
    idempotency_key text PRIMARY KEY,
    payload         jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
