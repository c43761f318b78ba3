-- A function body runs inside its caller's transaction.
CREATE FUNCTION place_order(p_customer bigint, p_total numeric) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
BEGIN
    INSERT INTO orders (customer_id, total) VALUES (p_customer, p_total) RETURNING id INTO v_id;
    INSERT INTO outbox (idempotency_key, payload)
    VALUES ('order-' || v_id || '-placed', jsonb_build_object('order', v_id));
    RETURN v_id;
END;
$$;

-- A data-modifying CTE is one atomic statement.
WITH o AS (
    INSERT INTO orders (customer_id, total) VALUES (7, 10) RETURNING id
)
INSERT INTO outbox (idempotency_key, payload)
SELECT 'order-' || id || '-placed', jsonb_build_object('order', id) FROM o;
