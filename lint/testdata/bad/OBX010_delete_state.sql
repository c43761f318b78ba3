-- "Clean up" the inbox: every consumer group applies everything again.
TRUNCATE inbox_key; -- want: OBX010
TRUNCATE TABLE app.inbox_watermark, audit_log; -- want: OBX010
DELETE FROM inbox_watermark; -- want: OBX010
-- One partition of a live group: its applied events look new.
DELETE FROM inbox_watermark WHERE consumer_group = 'billing' AND partition = 3; -- want: OBX010
-- One key: its replayed event is applied again when replayed again.
DELETE FROM inbox_key WHERE idempotency_key = 'order-42-created'; -- want: OBX010
DELETE FROM inbox_key; -- want: OBX010
