BEGIN;
SELECT id, payload FROM outbox WHERE sent_at IS NULL ORDER BY created_at LIMIT 100 FOR UPDATE SKIP LOCKED;
-- publish the batch here and wait for the broker's acknowledgement
UPDATE outbox SET sent_at = now() WHERE id = ANY($1);
COMMIT;
