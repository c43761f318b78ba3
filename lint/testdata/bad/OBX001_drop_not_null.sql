-- +goose Up
ALTER TABLE outbox ALTER COLUMN idempotency_key DROP NOT NULL; -- want: OBX001
