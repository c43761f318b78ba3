// Package writer inserts outbox events for walpost from a Go application,
// inside the application's own transaction.
//
// The outbox pattern is lost on the writing side more often than anywhere
// else: the outbox row written in a transaction of its own (lost when the
// connection drops between the two commits), an idempotency key made after
// commit or afresh on every retry (delivered twice), a missing key. This
// package makes the right way the only one it offers.
//
// # What it writes
//
// One row per [Event] into the outbox table, with exactly the columns
// walpost reads: idempotency_key, payload, topic, partition_key, event_type
// and headers. id and created_at are left to the table's defaults
// (gen_random_uuid() and now() in walpost's migration); sent_at, attempts
// and last_error are never written. An empty Topic, PartitionKey or
// EventType and an empty Headers map are written as NULL, which walpost
// reads as: the record goes to kafka.topic, is partitioned by the
// idempotency key, has no event_type header, has no extra headers.
//
// # What it never does
//
//   - It never begins, commits or rolls back a transaction, and never opens
//     a connection: every function takes the caller's transaction (a
//     [pgx.Tx], or a *sql.Tx for the functions ending in SQL). A pool or a
//     bare connection, which would commit the outbox row on its own, does
//     not satisfy the parameter types. The event is written if and only if
//     the caller's transaction commits.
//   - It never makes up an idempotency key: the caller sets Event.Key,
//     before the transaction, with [NewKey] (a UUIDv7) or [DeriveKey] (a
//     UUIDv5 of a natural key), and keeps it across retries.
//   - It never sends a statement with an event it has refused: every event
//     of a call is checked first, so a refused event leaves the
//     transaction as it was (PostgreSQL would have aborted it).
//   - It never retries, and never puts a payload in an error message.
//
// # Errors
//
// An event that cannot be delivered as written is refused before the
// database sees it with an [*EventError] matching [ErrInvalidEvent], naming
// the field:
//
//   - idempotency_key: empty (walpost would quarantine the row as
//     EMPTY_KEY), or not valid UTF-8 or containing a NUL byte (PostgreSQL
//     refuses both);
//   - payload: empty, or not valid JSON (the column is jsonb NOT NULL);
//   - headers: a name walpost sets itself (idempotency_key, outbox_id,
//     commit_lsn, created_at, event_type, replayed_from_poison) or an empty
//     name. Headers is a map of strings, so it is a JSON object of strings by
//     construction (walpost quarantines any other headers as
//     INVALID_HEADERS);
//   - topic, partition_key, event_type, headers: not valid UTF-8 or with a
//     NUL byte;
//   - in a batch, a key that appears twice (PostgreSQL would report the
//     second as a duplicate, which a caller would take for "already
//     written").
//
// A key already in the table (SQLSTATE 23505, unique_violation, on the
// UNIQUE constraint of idempotency_key) is a [*DuplicateKeyError] matching
// [ErrDuplicateKey]: the event was written by an earlier, committed attempt
// of the same unit of work. PostgreSQL has aborted the transaction by then,
// so the caller rolls back and treats the work as done. A unique violation
// whose detail names other columns is not a duplicate key and is returned
// wrapped as it came.
//
// Any other error comes from the database, wrapped with the table's name;
// after it the transaction is aborted and can only be rolled back.
//
// # Batches
//
// [InsertBatch] sends one COPY for the whole batch through a pgx.Tx;
// [InsertBatchSQL] sends one multi-row INSERT per [MaxRowsPerStatement]
// events through a *sql.Tx (PostgreSQL allows 65535 parameters per
// statement, six per event). An empty batch sends nothing. A batch is all or
// nothing within the transaction, like a single insert.
//
// # Table
//
// The package-level functions write to the table "outbox". [NewTable] takes
// another name in the form walpost's postgres.table takes: an unquoted
// identifier, optionally schema-qualified ("app.outbox"), which PostgreSQL
// folds to lower case, resolved through the search_path when unqualified.
// The writer quotes it in every statement it builds.
//
// # Trace context
//
// [WithTraceContext] attaches the W3C traceparent and tracestate of the
// application's span to a context; every insert given that context writes
// them into each event's headers (traceparent, tracestate), and walpost
// produces the record with them, so the consumer continues the trace. The
// package takes the strings, not an OpenTelemetry span: it keeps its
// import set. A malformed traceparent is an error from WithTraceContext,
// never a refused event.
//
// # Keys
//
// [NewKey] returns a UUIDv7: time-ordered (keys made later in a process
// sort after earlier ones), random in its remaining bits. [DeriveKey]
// returns a UUIDv5 (SHA-1, RFC 9562) of an entity id and a version, in the
// namespace [KeyNamespace]: the same entity version always yields the same
// key, in any process or language, so a retry that recomputes the key
// cannot produce a second event.
//
// The package imports pgx, database/sql and the standard library only:
// not walpost's forwarder, its Kafka client or its configuration.
package writer
