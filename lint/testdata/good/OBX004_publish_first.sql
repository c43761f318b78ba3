CREATE FUNCTION relay_batch(n int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    r record;
    c int := 0;
BEGIN
    FOR r IN SELECT * FROM outbox WHERE sent_at IS NULL ORDER BY created_at LIMIT n FOR UPDATE SKIP LOCKED LOOP
        PERFORM publish_event(r.topic, r.payload);
        UPDATE outbox SET sent_at = now() WHERE id = r.id;
        c := c + 1;
    END LOOP;
    RETURN c;
END;
$$;
