-- +goose Up
-- walpost recover without a clock (DESIGN.md, "Recovery"): with each
-- position write walpost records the server's snapshot of that moment
-- (next_snapshot) and the WAL insert position read after it
-- (next_snapshot_lsn). Every transaction visible in that snapshot had
-- written its commit record before that position, so once the confirmed
-- position has reached it the snapshot becomes the row's snapshot: every
-- transaction visible in it is in Kafka, and recover re-sends the rows
-- whose inserting transaction it does not show, whatever their created_at.
ALTER TABLE walpost_position
    ADD COLUMN IF NOT EXISTS snapshot pg_snapshot,
    ADD COLUMN IF NOT EXISTS snapshot_lsn pg_lsn,
    ADD COLUMN IF NOT EXISTS next_snapshot pg_snapshot,
    ADD COLUMN IF NOT EXISTS next_snapshot_lsn pg_lsn;

-- +goose Down
ALTER TABLE walpost_position
    DROP COLUMN IF EXISTS snapshot,
    DROP COLUMN IF EXISTS snapshot_lsn,
    DROP COLUMN IF EXISTS next_snapshot,
    DROP COLUMN IF EXISTS next_snapshot_lsn;
