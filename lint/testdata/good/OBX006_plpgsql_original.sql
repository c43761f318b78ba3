CREATE FUNCTION replay_one(p_key text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    r poison_outbox%ROWTYPE;
BEGIN
    SELECT * INTO r FROM poison_outbox WHERE idempotency_key = p_key;
    INSERT INTO outbox (idempotency_key, payload, topic, headers)
    VALUES (r.idempotency_key, r.payload, r.topic, r.headers)
    ON CONFLICT (idempotency_key) DO NOTHING;
    UPDATE poison_outbox SET replayed_at = now(), replay_count = replay_count + 1 WHERE idempotency_key = p_key;
END;
$$;
