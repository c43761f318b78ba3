-- Looking up one row: order cannot matter.
SELECT 1 FROM outbox WHERE idempotency_key = $1 LIMIT 1;
SELECT * FROM outbox WHERE id = $1 FOR UPDATE SKIP LOCKED;
-- Pruning rows already sent: order cannot matter either.
DELETE FROM outbox WHERE id IN (SELECT id FROM outbox WHERE sent_at IS NOT NULL AND sent_at < now() - interval '7 days' LIMIT 1000);
-- Other tables are not the outbox.
SELECT * FROM jobs LIMIT 10 FOR UPDATE SKIP LOCKED;
