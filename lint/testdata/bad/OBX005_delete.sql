-- "Clean up" replayed poison rows: the audit trail is gone.
DELETE FROM poison_outbox WHERE replayed_at IS NOT NULL; -- want: OBX005
TRUNCATE TABLE poison_outbox; -- want: OBX005
