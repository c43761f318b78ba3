-- +goose Up
CREATE TABLE outbox (
    id              bigserial PRIMARY KEY,
    idempotency_key text,
    payload         jsonb NOT NULL
);
