INSERT INTO outbox (idempotency_key, payload, topic)
SELECT idempotency_key, payload, topic
FROM poison_outbox
WHERE replayed_at IS NULL
ON CONFLICT (idempotency_key) DO NOTHING;

-- A brand-new event may get a generated key: it is not a replay.
INSERT INTO outbox (idempotency_key, payload) VALUES (gen_random_uuid()::text, '{"hello":1}');
