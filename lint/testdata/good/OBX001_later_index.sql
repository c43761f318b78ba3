-- +goose Up
CREATE TABLE outbox (id bigserial PRIMARY KEY, payload jsonb NOT NULL);
ALTER TABLE outbox ADD COLUMN idempotency_key text NOT NULL;
CREATE UNIQUE INDEX CONCURRENTLY outbox_idempotency_key ON outbox (idempotency_key);
