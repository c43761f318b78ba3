CREATE TABLE outbox (
    seq             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key text NOT NULL UNIQUE,
    payload         jsonb NOT NULL,
    sent_at         timestamptz
);
SELECT seq, payload FROM outbox WHERE sent_at IS NULL ORDER BY seq ASC LIMIT 100 FOR UPDATE SKIP LOCKED;
