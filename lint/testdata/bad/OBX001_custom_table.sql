-- lint-options: outbox=app.events
CREATE TABLE app.events (
    id              bigserial PRIMARY KEY,
    idempotency_key text NOT NULL, -- want: OBX001
    payload         jsonb NOT NULL
);
-- Not the outbox under this configuration:
CREATE TABLE outbox (id bigserial PRIMARY KEY, idempotency_key text);
