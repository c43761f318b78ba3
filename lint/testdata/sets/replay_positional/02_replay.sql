-- No column list: the positions come from 01_schema.sql.
INSERT INTO outbox SELECT md5(random()::text), payload, now() FROM poison_outbox; -- want: OBX006
INSERT INTO outbox SELECT idempotency_key, payload, now() FROM poison_outbox;
