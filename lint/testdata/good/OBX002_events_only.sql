-- A script that only emits events has no business write to pair with.
INSERT INTO outbox (idempotency_key, payload) VALUES ('seed-1', '{"seed":1}');
INSERT INTO outbox (idempotency_key, payload) VALUES ('seed-2', '{"seed":2}');
