-- +goose Up
-- walpost's own record of progress, one row per slot (DESIGN.md, "Position").
-- The slot stays the server's truth; this row is what walpost confirmed, on
-- which cluster (system_identifier) and timeline. It is written with
-- synchronous_commit = on whenever the confirmed position moves, so it
-- survives a crash that sends the slot back to its last checkpoint.
CREATE TABLE IF NOT EXISTS walpost_position (
    slot              text PRIMARY KEY,
    system_identifier bigint NOT NULL,
    timeline          int NOT NULL,
    confirmed_lsn     pg_lsn NOT NULL,
    -- commit time of the last transaction confirmed (NULL before the first)
    last_commit_at    timestamptz,
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
-- Not provided: the row is what tells a lost slot from a first install.
SELECT 1;
