-- The worker counts failures but nothing ever stops retrying.
SELECT id, payload FROM outbox WHERE sent_at IS NULL ORDER BY created_at LIMIT 10 FOR UPDATE SKIP LOCKED;
UPDATE outbox SET attempts = attempts + 1, last_error = $2 WHERE id = $1; -- want: OBX007
