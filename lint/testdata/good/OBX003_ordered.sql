SELECT id, payload FROM outbox
WHERE sent_at IS NULL
ORDER BY created_at
LIMIT 50
FOR UPDATE SKIP LOCKED;

SELECT created_at, id, payload FROM outbox WHERE sent_at IS NULL ORDER BY 1, 2 LIMIT 10;
