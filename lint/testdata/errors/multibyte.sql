-- want-error: 3:29
-- Columns count characters, as PostgreSQL's cursor does: é is one.
SELECT 'évènement', ééé FROM;
