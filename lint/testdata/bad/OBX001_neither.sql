CREATE TABLE outbox (id bigserial PRIMARY KEY, idempotency_key text, payload jsonb); -- want: OBX001 OBX001
