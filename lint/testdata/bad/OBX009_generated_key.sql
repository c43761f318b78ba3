-- An application's insert: a retried request makes a second key.
INSERT INTO outbox (idempotency_key, payload, topic)
VALUES (gen_random_uuid()::text, '{"order": 42}', 'orders'); -- want: OBX009

INSERT INTO outbox (idempotency_key, payload)
SELECT 'order-' || o.id || '-' || now(), to_jsonb(o) -- want: OBX009
FROM orders o WHERE o.id = $1;

INSERT INTO outbox (payload, idempotency_key)
VALUES ('{}', md5(random()::text)); -- want: OBX009
