-- +goose Up
-- A later migration completes the key: the file set as a whole is fine.
ALTER TABLE outbox ALTER COLUMN idempotency_key SET NOT NULL;
ALTER TABLE outbox ADD CONSTRAINT outbox_idempotency_key_key UNIQUE (idempotency_key);
