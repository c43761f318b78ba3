BEGIN;
UPDATE orders SET status = 'paid' WHERE id = 42;
COMMIT;

BEGIN;
INSERT INTO outbox (idempotency_key, payload) VALUES ('order-42-paid', '{"order":42}'); -- want: OBX002
COMMIT;
