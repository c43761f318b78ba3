CREATE PUBLICATION walpost_outbox FOR TABLE outbox WITH (publish = 'insert');
ALTER PUBLICATION walpost_outbox SET (publish = 'insert, delete'); -- want: OBX008

CREATE PUBLICATION audit FOR TABLE orders;
ALTER PUBLICATION audit ADD TABLE outbox; -- want: OBX008
