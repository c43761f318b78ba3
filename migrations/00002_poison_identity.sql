-- +goose Up
-- A quarantined event is kept under its own identity: the outbox row's id
-- and the commit LSN of its transaction. Keyed by idempotency_key alone,
-- a second event with one key (the first outbox row deleted, or a key
-- reused) was dropped by ON CONFLICT DO NOTHING. Existing rows are kept;
-- a row without an outbox id gets one derived from its key and commit LSN
-- (the same derivation walpost uses for an event whose id is NULL).
UPDATE poison_outbox
   SET outbox_id = md5(idempotency_key || '/' || commit_lsn::text)::uuid
 WHERE outbox_id IS NULL;

ALTER TABLE poison_outbox ALTER COLUMN outbox_id SET NOT NULL;
ALTER TABLE poison_outbox DROP CONSTRAINT IF EXISTS poison_outbox_pkey;
ALTER TABLE poison_outbox ADD CONSTRAINT poison_outbox_pkey PRIMARY KEY (outbox_id, commit_lsn);

-- `walpost poison replay --key K` reads every row of K.
CREATE INDEX IF NOT EXISTS poison_outbox_idempotency_key ON poison_outbox (idempotency_key);

-- +goose Down
-- Not provided: going back to one row per key would have to drop events.
SELECT 1;
