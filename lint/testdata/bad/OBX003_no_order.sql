-- Poller without ordering: consumers that care about order break.
SELECT id, payload FROM outbox WHERE sent_at IS NULL LIMIT 50 FOR UPDATE SKIP LOCKED; -- want: OBX003

SELECT id, payload FROM outbox WHERE sent_at IS NULL FOR UPDATE SKIP LOCKED; -- want: OBX003
