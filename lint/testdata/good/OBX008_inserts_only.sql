CREATE PUBLICATION walpost_outbox FOR TABLE outbox WITH (publish = 'insert');
-- Publications that do not cover the outbox are not walpost's concern.
CREATE PUBLICATION analytics FOR TABLE orders, customers;
