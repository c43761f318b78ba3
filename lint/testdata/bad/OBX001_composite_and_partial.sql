-- Unique per tenant only, and a partial index: neither makes the key unique.
CREATE TABLE outbox (
    id              bigserial PRIMARY KEY,
    tenant_id       int NOT NULL,
    idempotency_key text NOT NULL, -- want: OBX001
    payload         jsonb NOT NULL,
    UNIQUE (tenant_id, idempotency_key)
);
CREATE UNIQUE INDEX outbox_key_recent ON outbox (idempotency_key) WHERE created_at > '2024-01-01';
