-- Replay with a fresh key: consumers cannot recognise the redelivery.
INSERT INTO outbox (idempotency_key, payload, topic)
SELECT gen_random_uuid()::text, payload, topic -- want: OBX006
FROM poison_outbox
WHERE replayed_at IS NULL;

INSERT INTO outbox (payload, idempotency_key)
SELECT p.payload, p.idempotency_key || '-' || now() -- want: OBX006
FROM poison_outbox p;
