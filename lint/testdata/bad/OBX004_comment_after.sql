-- Claim a batch by marking it sent, then publish it: a crash in between
-- loses the whole batch.
BEGIN;
SELECT id, payload FROM outbox WHERE sent_at IS NULL ORDER BY created_at LIMIT 100 FOR UPDATE SKIP LOCKED;
UPDATE outbox SET sent_at = now() WHERE id = ANY($1); -- want: OBX004
COMMIT;
-- publish the batch to Kafka (application code)
