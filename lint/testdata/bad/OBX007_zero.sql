CREATE TABLE relay_settings (
    id           int PRIMARY KEY,
    max_attempts int NOT NULL DEFAULT 0 -- want: OBX007
);
UPDATE relay_settings SET max_attempts = 0 WHERE id = 1; -- want: OBX007
SET walpost.max_attempts = 0; -- want: OBX007
