-- +goose Up
-- Rewind a group by hand: the events after the new LSN are applied twice.
UPDATE inbox_watermark SET commit_lsn = '0/0', keys = '{}' WHERE consumer_group = 'billing'; -- want: OBX010
CREATE FUNCTION reset_inbox(grp text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE inbox_watermark SET keys = '{}' WHERE consumer_group = grp; -- want: OBX010
    DELETE FROM inbox_key WHERE consumer_group = grp AND topic = 'orders'; -- want: OBX010
END;
$$;
