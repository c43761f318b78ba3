-- want-error: 6:5
CREATE FUNCTION relay() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE outbox SET sent_at = now() WHERE id = 1;
    PERFORM publish_event('x');
    SELEC 1;
END;
$$;
