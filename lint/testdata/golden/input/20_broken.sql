SELECT * FROM outbox WHERE sent_at IS NULL ORDER BY created_at LIMIT;
