-- A hand-written relay with most of the classic mistakes.
INSERT INTO orders (id, status) VALUES (1, 'new');
INSERT INTO outbox (idempotency_key, payload) VALUES ('order-1-created', '{"order":1,"note":"café"}');

BEGIN;
SELECT * FROM outbox WHERE sent_at IS NULL ORDER BY id LIMIT 10 FOR UPDATE SKIP LOCKED;
UPDATE outbox SET sent_at = now() WHERE id = $1;
SELECT publish_event($2);
UPDATE outbox SET attempts = attempts + 1 WHERE id = $1;
COMMIT;

DELETE FROM poison_outbox WHERE replayed_at IS NOT NULL;
INSERT INTO outbox (idempotency_key, payload) SELECT gen_random_uuid()::text, payload FROM poison_outbox;
