SELECT id, payload FROM outbox
WHERE sent_at IS NULL AND attempts > 0
ORDER BY created_at LIMIT 10 FOR UPDATE SKIP LOCKED;
