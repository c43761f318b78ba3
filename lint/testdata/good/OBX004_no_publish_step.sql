-- Nothing in this file tells where publishing happens: not judged.
UPDATE outbox SET sent_at = now() WHERE id = $1;
-- Resetting sent_at is not marking a row sent.
UPDATE outbox SET sent_at = NULL WHERE id = $1;
