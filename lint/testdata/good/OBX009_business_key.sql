-- Keys derived from the business event, or given by the caller: a retry
-- inserts the same key, and the unique constraint refuses the copy.
INSERT INTO outbox (idempotency_key, payload, topic)
VALUES ('order-' || 42 || '-created', '{"order": 42}', 'orders');

INSERT INTO outbox (idempotency_key, payload)
VALUES ($1, $2)
ON CONFLICT (idempotency_key) DO NOTHING;

-- A generated id in another column is fine: it is not the key.
INSERT INTO outbox (id, idempotency_key, payload)
VALUES (gen_random_uuid(), $1, $2);

-- The key may be generated once, by a reviewed exception.
INSERT INTO outbox (idempotency_key, payload)
VALUES (gen_random_uuid()::text, '{}'); -- walpost-lint: ignore volatile-key heartbeat rows, never retried
