-- Two autocommit statements: a dropped connection between them loses the event.
INSERT INTO accounts (id, balance) VALUES ('a1', 100);
-- network drop here == event never sent, no row to recover
INSERT INTO outbox (idempotency_key, payload) -- want: OBX002
VALUES ('acct-a1-debit-001', '{"event":"account.debited","account":"a1"}');
