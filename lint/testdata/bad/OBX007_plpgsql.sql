CREATE FUNCTION record_failure(p_id bigint, p_err text, max_attempts int DEFAULT 0) RETURNS void -- want: OBX007
LANGUAGE plpgsql AS $$
DECLARE
    v_attempts int;
BEGIN
    SELECT attempts INTO v_attempts FROM outbox WHERE id = p_id FOR UPDATE;
    v_attempts := v_attempts + 1; -- want: OBX007
    UPDATE outbox SET attempts = v_attempts, last_error = p_err WHERE id = p_id; -- want: OBX007
END;
$$;
