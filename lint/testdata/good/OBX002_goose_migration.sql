-- +goose Up
-- goose runs this section in one transaction: backfill and event commit together.
UPDATE plans SET tier = 'pro' WHERE code = 'gold';
INSERT INTO outbox (idempotency_key, payload) VALUES ('plans-gold-to-pro', '{"plans":"gold->pro"}');

-- +goose Down
UPDATE plans SET tier = 'gold' WHERE code = 'gold';
