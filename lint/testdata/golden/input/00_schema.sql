-- +goose Up
CREATE TABLE outbox (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    idempotency_key text,
    payload         jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz,
    attempts        int NOT NULL DEFAULT 0
);
CREATE PUBLICATION walpost_outbox FOR TABLE outbox;
