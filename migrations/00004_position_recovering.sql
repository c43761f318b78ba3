-- +goose Up
-- walpost recover marks the row before it creates a slot over a gap and
-- clears the mark when the gap's rows are in Kafka and the new position is
-- recorded (DESIGN.md, "Recovery"). walpost run refuses a marked row: a
-- recovery that stopped half way left a slot whose position is past rows
-- not yet produced.
ALTER TABLE walpost_position ADD COLUMN IF NOT EXISTS recovering_since timestamptz;

-- +goose Down
ALTER TABLE walpost_position DROP COLUMN IF EXISTS recovering_since;
