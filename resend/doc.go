// Package resend is `walpost resend`: it re-produces outbox rows that are
// still in the table, chosen by time, key and predicate, beside a running
// walpost run (docs/resend.md). Debezium's incremental snapshots with
// conditions and Sequin's partial backfills do the same.
//
// Run:
//
//  1. checks the flags (Options.Check) and the --where predicate
//     (ParseWhere: PostgreSQL's lexical rules, then an allowlist of
//     keywords, operators, functions and types; every other word must be
//     a column) before it connects;
//  2. reads the progress file: the resend to continue with --resume, or
//     one that did not finish, which it refuses to overwrite;
//  3. on a plain SQL connection, resolves the table, checks the
//     predicate's columns and reads track_commit_timestamp;
//  4. opens a REPEATABLE READ, READ ONLY transaction with search_path =
//     pg_catalog and standard_conforming_strings on: its snapshot chooses
//     the rows (those committed before it), counts them (PostgreSQL
//     refuses a predicate that is malformed or not boolean here, before
//     any record), and with DryRun stops there;
//  5. records the selection in the progress file, then streams the rows
//     in Order through the sink (walpost's idempotent producer; in
//     exactly-once mode a transactional producer of its own), each record
//     marked walpost_resent: true, at most --max-rate per second and at
//     most pipeline.max_inflight_events unacknowledged, rewriting the
//     progress file every second with the last row of the acknowledged
//     prefix;
//  6. waits for every acknowledgement (commits the last transaction),
//     marks the progress file finished and returns the report.
//
// Invariants:
//
//  1. Resend never touches replication state: no slot, no publication,
//     no walpost_position row, no checkpoint of the slot (in exactly-once
//     mode its transactional id and checkpoint key are its own). A
//     walpost run streaming beside it is not disturbed beyond sharing
//     the database and the brokers.
//  2. The rows produced are exactly those of the snapshot that match the
//     selection, each once per run, in Order; a resumed run continues
//     after the recorded row, in the same order.
//  3. The progress file's cursor only names a row of a prefix of the
//     order that is entirely in Kafka (acknowledged; in exactly-once mode
//     committed), so --resume skips no row that is not.
//  4. Nothing in --where runs before it was checked, it cannot end the
//     parentheses it is embedded in, and nothing it calls can write: the
//     transaction is READ ONLY and resolves names in pg_catalog only.
//  5. Nothing is dropped: a row Kafka refuses (or walpost cannot build)
//     stops the resend with its key; the progress stays before it.
//
// Order, "commit order": with track_commit_timestamp on, the commit
// timestamp of the row's inserting transaction, then that transaction's
// id and the insert's command id and place (insert order within a
// transaction). Commit timestamps are taken just before the commit
// record is written, so two transactions committing within microseconds
// may be ordered by timestamp in the other order than their commits.
// With it off, created_at (by default the transaction's start), which
// transactions running side by side may commit in another order; rows of
// one transaction stay together in insert order.
package resend
