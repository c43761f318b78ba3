-- want-error: 4:49
SELECT 1;

CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $body$ SELECT 1;
