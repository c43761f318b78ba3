CREATE FUNCTION relay_one(p_id bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    SELECT * INTO r FROM outbox WHERE id = p_id FOR UPDATE;
    UPDATE outbox SET sent_at = clock_timestamp() WHERE id = p_id; -- want: OBX004
    PERFORM publish_event(r.topic, r.payload);
END;
$$;
