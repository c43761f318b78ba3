SELECT id, payload -- want: OBX003
FROM outbox
WHERE sent_at IS NULL
ORDER BY created_at DESC
LIMIT 100;
