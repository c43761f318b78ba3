CREATE FUNCTION record_failure(p_id bigint, p_err text, max_attempts int DEFAULT 5) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_attempts int;
BEGIN
    UPDATE outbox SET attempts = attempts + 1, last_error = p_err WHERE id = p_id
    RETURNING attempts INTO v_attempts;
    IF v_attempts >= max_attempts THEN
        INSERT INTO poison_outbox (idempotency_key, payload, attempts, last_error)
        SELECT idempotency_key, payload, attempts, last_error FROM outbox WHERE id = p_id;
    END IF;
END;
$$;
