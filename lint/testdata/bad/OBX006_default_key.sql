CREATE TABLE outbox (
    id              bigserial PRIMARY KEY,
    idempotency_key text NOT NULL UNIQUE DEFAULT gen_random_uuid()::text,
    payload         jsonb NOT NULL
);
-- The key column is left out, so its DEFAULT makes up a new one.
INSERT INTO outbox (payload) SELECT payload FROM poison_outbox; -- want: OBX006
INSERT INTO outbox (idempotency_key, payload) VALUES (DEFAULT, (SELECT payload FROM poison_outbox LIMIT 1)); -- want: OBX006
