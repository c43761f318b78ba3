INSERT INTO outbox (idempotency_key, payload, topic)
SELECT idempotency_key, payload, topic
FROM poison_outbox
WHERE replayed_at IS NULL
ON CONFLICT (idempotency_key) DO NOTHING;

-- A brand-new event with a generated key is not a replay: OBX006 leaves it
-- alone (OBX009 would not, hence the suppression).
-- walpost-lint: ignore OBX009 this file shows OBX006 only
INSERT INTO outbox (idempotency_key, payload) VALUES (gen_random_uuid()::text, '{"hello":1}');
