CREATE TABLE outbox (
    id              bigserial PRIMARY KEY,
    idempotency_key text NOT NULL UNIQUE DEFAULT gen_random_uuid()::text,
    payload         jsonb NOT NULL
);
-- The key column is left out: its DEFAULT makes one up per attempt.
INSERT INTO outbox (payload) VALUES ('{"order": 42}'); -- want: OBX009

CREATE FUNCTION emit_order(p_order bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox (idempotency_key, payload)
    VALUES (DEFAULT, jsonb_build_object('order', p_order)); -- want: OBX009
END;
$$;
