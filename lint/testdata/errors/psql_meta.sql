-- want-error: 3:1
-- psql meta-commands are not SQL: run lint on plain SQL files.
\set ON_ERROR_STOP on
INSERT INTO outbox (idempotency_key, payload) VALUES ('k', '{}');
