CREATE PUBLICATION walpost_outbox FOR ALL TABLES WITH (publish = 'insert'); -- want: OBX008
CREATE PUBLICATION app_schema FOR TABLES IN SCHEMA public WITH (publish = 'insert'); -- want: OBX008
