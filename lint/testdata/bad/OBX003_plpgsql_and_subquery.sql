CREATE FUNCTION claim_batch(n int) RETURNS SETOF outbox LANGUAGE plpgsql AS $$
DECLARE
    r outbox%ROWTYPE;
BEGIN
    FOR r IN SELECT * FROM outbox WHERE sent_at IS NULL LIMIT n LOOP -- want: OBX003
        RETURN NEXT r;
    END LOOP;
END;
$$;

UPDATE outbox SET attempts = attempts + 1
WHERE id IN (SELECT id FROM outbox WHERE sent_at IS NULL AND attempts < 5 LIMIT 10 FOR UPDATE SKIP LOCKED); -- want: OBX003
