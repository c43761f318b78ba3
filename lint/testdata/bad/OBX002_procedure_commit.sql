CREATE PROCEDURE pay_order(p_id bigint) LANGUAGE plpgsql AS $$
BEGIN
    UPDATE orders SET status = 'paid' WHERE id = p_id;
    COMMIT;
    INSERT INTO outbox (idempotency_key, payload) -- want: OBX002
    VALUES ('order-' || p_id || '-paid', jsonb_build_object('order', p_id));
END;
$$;

CREATE PROCEDURE ship(p_id bigint) LANGUAGE plpgsql AS $$ BEGIN UPDATE orders SET status = 'shipped' WHERE id = p_id; COMMIT; INSERT INTO outbox (idempotency_key, payload) VALUES ('ship-' || p_id, '{}'); END $$; -- want: OBX002
