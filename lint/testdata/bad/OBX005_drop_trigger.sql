-- +goose Up
DROP TRIGGER poison_outbox_no_delete ON poison_outbox; -- want: OBX005
ALTER TABLE poison_outbox DISABLE TRIGGER ALL; -- want: OBX005
