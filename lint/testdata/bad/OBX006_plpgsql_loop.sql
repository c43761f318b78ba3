CREATE FUNCTION replay_poison() RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    r poison_outbox%ROWTYPE;
    n int := 0;
BEGIN
    FOR r IN SELECT * FROM poison_outbox WHERE replayed_at IS NULL ORDER BY created_at LOOP
        INSERT INTO outbox (idempotency_key, payload, topic)
        VALUES (uuid_generate_v4()::text, r.payload, r.topic); -- want: OBX006
        UPDATE poison_outbox SET replayed_at = now(), replay_count = replay_count + 1
        WHERE idempotency_key = r.idempotency_key;
        n := n + 1;
    END LOOP;
    RETURN n;
END;
$$;
