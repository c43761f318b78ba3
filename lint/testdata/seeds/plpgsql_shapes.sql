-- Fuzz seeds: shapes of functions, procedures and DO blocks the linter
-- expands. Every statement here is valid.
CREATE FUNCTION f1(a outbox.id%TYPE, OUT b int, INOUT c text) LANGUAGE plpgsql AS $$ BEGIN b := 1; END $$;
CREATE FUNCTION f2() RETURNS TABLE (x int, y text) LANGUAGE plpgsql AS $$ BEGIN RETURN QUERY SELECT 1, 'a'; END $$;
CREATE FUNCTION f3() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.attempts := NEW.attempts + 1; IF NEW.attempts > 5 THEN RETURN NULL; END IF; RETURN NEW; END $$;
CREATE FUNCTION f4() RETURNS event_trigger LANGUAGE plpgsql AS $$ BEGIN RAISE NOTICE '%', tg_event; END $$;
CREATE FUNCTION f5(anyelement, VARIADIC text[]) RETURNS anyelement LANGUAGE plpgsql AS $$ BEGIN RETURN $1; END $$;
CREATE FUNCTION f6() RETURNS SETOF record LANGUAGE plpgsql AS 'BEGIN RETURN; END';
CREATE FUNCTION f7() RETURNS int LANGUAGE plpgsql AS E'BEGIN\n  RETURN 1;\nEND';
DO $$ DECLARE c CURSOR (k text) FOR SELECT * FROM outbox WHERE idempotency_key = k; BEGIN OPEN c('a'); CLOSE c; END $$;
CREATE FUNCTION f8() RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS $$
DECLARE
    x int;
    r record;
    max_attempts CONSTANT int := 5;
BEGIN
    FOREACH x IN ARRAY ARRAY[1, 2] LOOP
        CONTINUE WHEN x = 1;
    END LOOP;
    <<relay>>
    FOR r IN SELECT * FROM outbox WHERE sent_at IS NULL AND attempts < max_attempts ORDER BY created_at LIMIT 10 FOR UPDATE SKIP LOCKED LOOP
        BEGIN
            PERFORM publish_event(r.topic, r.payload);
            UPDATE outbox SET sent_at = now() WHERE id = r.id;
        EXCEPTION WHEN others THEN
            UPDATE outbox SET attempts = attempts + 1, last_error = SQLERRM WHERE id = r.id;
            EXIT relay WHEN r.attempts >= max_attempts;
        END;
    END LOOP relay;
    CASE x WHEN 1 THEN NULL; ELSE NULL; END CASE;
    WHILE x < 10 LOOP x := x + 1; END LOOP;
    EXECUTE 'SELECT 1' INTO x;
    EXECUTE format('SELECT %s', 1) INTO x USING x;
    GET DIAGNOSTICS x = ROW_COUNT;
    ASSERT x > 0, 'x';
    RETURN;
END;
$$;
CREATE OR REPLACE PROCEDURE p1(INOUT x int) LANGUAGE plpgsql AS $$ BEGIN x := x + 1; COMMIT AND CHAIN; ROLLBACK; END $$;
CREATE FUNCTION f9() RETURNS void LANGUAGE plpgsql AS $$ BEGIN DO $x$ BEGIN INSERT INTO orders VALUES (1); END $x$; CALL p1(1); END $$;
CREATE FUNCTION s1(a int) RETURNS int LANGUAGE sql AS 'SELECT a + 1';
CREATE FUNCTION s2(a int) RETURNS int LANGUAGE sql IMMUTABLE RETURN a + 1;
CREATE FUNCTION s3() RETURNS void LANGUAGE sql BEGIN ATOMIC INSERT INTO orders VALUES (1); INSERT INTO outbox (idempotency_key, payload) VALUES ('k', '{}'); END;
CREATE FUNCTION c1() RETURNS int LANGUAGE c AS 'obj', 'sym';
CREATE FUNCTION py() RETURNS int LANGUAGE plpython3u AS $$ return 1 $$;
DO LANGUAGE plpgsql $$ BEGIN COMMIT; END $$;
