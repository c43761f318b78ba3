-- +goose NO TRANSACTION
-- +goose Up
INSERT INTO plans (code) VALUES ('pro');
INSERT INTO outbox (idempotency_key, payload) VALUES ('plan-pro-created', '{"plan":"pro"}'); -- want: OBX002
