-- want-error: 3:43
SELECT id FROM outbox
WHERE sent_at IS NULL ORDER BY created_at LIMT 10;
