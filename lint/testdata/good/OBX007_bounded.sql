SELECT id, payload FROM outbox
WHERE sent_at IS NULL AND attempts < 5
ORDER BY created_at LIMIT 10 FOR UPDATE SKIP LOCKED;
UPDATE outbox SET attempts = attempts + 1, last_error = $2 WHERE id = $1;
