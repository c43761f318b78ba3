UPDATE outbox SET attempts = attempts + 1, last_error = $2 WHERE id = $1; -- want: OBX007
INSERT INTO outbox (idempotency_key, payload) VALUES ($1, $2)
ON CONFLICT (idempotency_key) DO UPDATE SET attempts = outbox.attempts + 1; -- want: OBX007
