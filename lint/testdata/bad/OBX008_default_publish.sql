-- publish defaults to 'insert, update, delete, truncate'.
CREATE PUBLICATION walpost_outbox FOR TABLE outbox; -- want: OBX008
CREATE PUBLICATION outbox_all_ops FOR TABLE outbox WITH (publish = 'insert, update, delete'); -- want: OBX008
