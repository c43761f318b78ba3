INSERT INTO invoices (id, total) VALUES (7, 120);
DO $$
BEGIN
    INSERT INTO outbox (idempotency_key, payload) VALUES ('invoice-7', '{"invoice":7}'); -- want: OBX002
END
$$;
