-- lint-options: poison=ops.dead_letters
DELETE FROM ops.dead_letters WHERE id = 1; -- want: OBX005
-- Not the poison table under this configuration:
DELETE FROM poison_outbox WHERE id = 1;
