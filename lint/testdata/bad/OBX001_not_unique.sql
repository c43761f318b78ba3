-- The key is NOT NULL but nothing makes it unique: a retried transaction
-- stores the event twice.
CREATE TABLE outbox (
    id              bigserial PRIMARY KEY,
    idempotency_key text NOT NULL, -- want: OBX001
    payload         jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
