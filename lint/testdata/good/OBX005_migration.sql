-- +goose Up
-- The idempotent re-creation of the guard is fine.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION poison_outbox_refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'rows of % are never deleted', TG_TABLE_NAME;
END;
$$;
-- +goose StatementEnd
DROP TRIGGER IF EXISTS poison_outbox_no_delete ON poison_outbox;
CREATE TRIGGER poison_outbox_no_delete
    BEFORE DELETE ON poison_outbox
    FOR EACH ROW EXECUTE FUNCTION poison_outbox_refuse_delete();

-- +goose Down
DROP TRIGGER IF EXISTS poison_outbox_no_delete ON poison_outbox;
DROP TABLE poison_outbox;
