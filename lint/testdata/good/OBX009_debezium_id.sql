-- lint-options: outbox=outboxevent key=id
-- Debezium's outbox: the event id is the idempotency key. The application
-- generates it once, before the transaction, and keeps it across retries.
CREATE TABLE outboxevent (
    id            uuid NOT NULL PRIMARY KEY,
    aggregatetype varchar(255) NOT NULL,
    aggregateid   varchar(255) NOT NULL,
    type          varchar(255) NOT NULL,
    payload       jsonb
);
INSERT INTO outboxevent (id, aggregatetype, aggregateid, type, payload)
VALUES ($1, 'order', $2, 'OrderCreated', $3);
-- Another column's clock is no key: fine.
INSERT INTO outboxevent (id, aggregatetype, aggregateid, type, payload)
VALUES ($1, 'order', $2, 'OrderShipped', jsonb_build_object('at', now()));
