CREATE FUNCTION purge_poison(keep interval) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    ALTER TABLE poison_outbox DISABLE TRIGGER poison_outbox_no_delete; -- want: OBX005
    DELETE FROM poison_outbox WHERE poisoned_at < now() - keep; -- want: OBX005
    EXECUTE 'TRUNCATE poison_outbox'; -- want: OBX005
END;
$$;
