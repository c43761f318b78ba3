-- +goose Up
-- Tables of the same shape that are not the inbox's, and the consumer's
-- own effects, are not judged.
CREATE TABLE credits (account text PRIMARY KEY, amount bigint NOT NULL);
DELETE FROM credits WHERE account = 'a1';
DELETE FROM my_inbox_keys WHERE idempotency_key = 'x';
CREATE FUNCTION reread(grp text, t text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    -- Read a topic again: next_offset only.
    UPDATE inbox_watermark SET next_offset = -1, updated_at = now() WHERE consumer_group = grp AND topic = t;
END;
$$;
-- Retire a group: its rows of both tables, the group a parameter.
CREATE FUNCTION retire_group(grp text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM inbox_key WHERE consumer_group = grp;
    DELETE FROM inbox_watermark w WHERE w.consumer_group = grp;
END;
$$;
