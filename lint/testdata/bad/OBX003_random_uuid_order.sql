CREATE TABLE outbox (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    idempotency_key text NOT NULL UNIQUE,
    payload         jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz
);
-- ORDER BY a random UUID is no order at all.
SELECT * FROM outbox WHERE sent_at IS NULL ORDER BY id LIMIT 10 FOR UPDATE SKIP LOCKED; -- want: OBX003
SELECT * FROM outbox WHERE sent_at IS NULL ORDER BY topic, created_at LIMIT 10; -- want: OBX003
