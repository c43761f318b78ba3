-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'walpost_outbox') THEN
        CREATE PUBLICATION walpost_outbox FOR TABLE public.outbox WITH (publish = 'insert');
    END IF;
END;
$$;
-- +goose StatementEnd
ALTER PUBLICATION walpost_outbox SET (publish = 'insert', publish_via_partition_root = true);
