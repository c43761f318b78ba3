CREATE TABLE outbox (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    idempotency_key text NOT NULL UNIQUE,
    payload         jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz,
    attempts        int NOT NULL DEFAULT 0,
    last_error      text
);
-- Other tables may have nullable keys of their own.
CREATE TABLE webhooks (id bigserial PRIMARY KEY, idempotency_key text);
