-- Replayed rows stay, with their audit trail.
UPDATE poison_outbox SET replayed_at = now(), replay_count = replay_count + 1 WHERE idempotency_key = $1;
-- An audit trigger that does not guard DELETE may be dropped.
CREATE TRIGGER poison_outbox_audit AFTER INSERT ON poison_outbox FOR EACH ROW EXECUTE FUNCTION audit();
DROP TRIGGER poison_outbox_audit ON poison_outbox;
-- Deleting from the outbox itself is the application's business.
DELETE FROM outbox WHERE sent_at < now() - interval '30 days';
