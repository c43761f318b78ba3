INSERT INTO outbox (idempotency_key, payload) VALUES (gen_random_uuid()::text, '{}');
