-- Debezium's outbox table as its Quarkus outbox extension creates it
-- (io.debezium.outbox.quarkus, Hibernate's DDL for OutboxEvent), the layout
-- of the Outbox Event Router's defaults: id (the event id, table.field.event.id),
-- aggregatetype (route.by.field), aggregateid (the record key), type, payload.
create table OutboxEvent (
    id uuid not null,
    aggregatetype varchar(255) not null,
    aggregateid varchar(255) not null,
    type varchar(255) not null,
    timestamp timestamp not null,
    payload varchar(8000),
    tracingspancontext varchar(256),
    primary key (id)
);

-- The publication walpost reads it through.
CREATE PUBLICATION walpost_outbox FOR TABLE outboxevent WITH (publish = 'insert');
