-- Retention of key rows by age (inbox.Prune's statement), a retired
-- consumer group's rows of both tables, and a partition read again from
-- its first offset (the watermark still skips what was applied).
DELETE FROM inbox_key WHERE consumer_group = 'billing' AND applied_at < now() - interval '30 days';
DELETE FROM inbox_key WHERE applied_at < now() - interval '30 days';
BEGIN;
DELETE FROM inbox_key WHERE consumer_group = 'legacy-billing';
DELETE FROM inbox_watermark WHERE consumer_group = 'legacy-billing';
COMMIT;
UPDATE inbox_watermark SET next_offset = -1 WHERE consumer_group = 'billing';
