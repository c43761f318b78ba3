-- want-error: 4:10
CREATE FUNCTION next_event() RETURNS SETOF outbox LANGUAGE sql AS $$
    SELECT * FROM outbox
    ORDR BY created_at;
$$;
