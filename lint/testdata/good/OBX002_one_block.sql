-- Good: one transaction for the business write and its event.
BEGIN;
INSERT INTO accounts (id, balance) VALUES ('a1', 100);
INSERT INTO outbox (idempotency_key, payload)
  VALUES ('acct-a1-debit-001', '{"event":"account.debited","account":"a1"}');
COMMIT;

START TRANSACTION ISOLATION LEVEL REPEATABLE READ;
UPDATE orders SET status = 'paid' WHERE id = 42;
SAVEPOINT before_event;
INSERT INTO outbox (idempotency_key, payload) VALUES ('order-42-paid', '{"order":42}');
END;
