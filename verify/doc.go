// Package verify checks, from the topic, that a running walpost delivers
// what was committed to its outbox table: every event, in order. It is
// the library behind `walpost verify`, and its validator is the one
// walpost's integration tests judge delivery with.
//
// # Validator
//
// Validate compares the events writers committed (Expected: key,
// transaction, position of the insert in it) with the records read back
// (Observed: key, partition, offset, the commit_lsn header), after
// CockroachDB's cdctest validators. Observed must be in offset order
// within each partition, the order a consumer reads them; partitions may
// interleave in any way. The Report lists:
//
//   - lost: every expected key with no record at all;
//   - duplicated: every extra copy of a key (at-least-once delivery allows
//     them, so they do not fail the verdict);
//   - out of order: judged on the first copy of each key, per partition,
//     against the previous first copy there: an offset that does not rise,
//     a commit LSN below the previous one (commit order), or, within one
//     transaction, an insert position below the previous one (insert
//     order);
//   - unexpected: records whose key no writer committed (counted, never
//     judged).
//
// Report.OK holds when nothing was lost and order held.
//
// # Leak test
//
// LeakTest.Run, in this order:
//
//  1. takes the end offset of every partition of the topic; a topic
//     unknown for 5 s is an error that says to start walpost run or create
//     it, and nothing is written;
//  2. resolves the outbox table the way walpost does (postgres.table);
//  3. starts a consumer at those offsets and waits (at most 10 s) until
//     its fetches are at every partition leader, so consumer start-up does
//     not count as latency;
//  4. writes Events rows from Writers connections, each transaction of
//     1..MaxTxnSize rows (uniformly at random), with keys
//     walpost-verify-<runid>-w<writer>-t<txn>-r<row>, JSON payloads of
//     about PayloadBytes bytes and event_type walpost.verify; a failed
//     write ends the run with an error;
//  5. waits until a record of every written key arrived, or Timeout after
//     the last commit, then reads on for Settle to count duplicates;
//  6. deletes its rows from the table unless KeepRows (the inserts are
//     already in the WAL, so this changes nothing walpost forwards); a
//     failed delete is a warning in the report, not an error;
//  7. returns a Result: the Validate verdict over its own records (keys
//     with its run's prefix; everything else on the topic is ignored),
//     the same verdict per partition, and the commit-to-consume latency.
//
// Every Kafka client of the leak test, the admin client of step 1 and the
// consumer, is built from Brokers and KafkaOpts, so it reaches a cluster
// that needs TLS or SASL with the options walpost run uses for it.
//
// The leak test forwards nothing: a walpost run with the same
// configuration must be running. Result.OK holds when nothing was lost,
// order held, every requested event was written and the run was not
// interrupted (a cancelled context ends it early with Interrupted set).
// An error from Run means the test could not run: a connection, a
// missing table or topic, a failed write, invalid parameters (all of
// them named at once).
//
// Latency is measured on this host's clock, from right after COMMIT
// returned to the writer to when the first copy of the record was
// fetched (never negative), and summarised by nearest rank (p50, p99,
// max). It is not the broker's append time: walpost stamps each record
// with its transaction's commit time.
//
// # Report
//
// Result.WriteText writes the human-readable report and
// Result.WriteJSON the same figures as JSON; the JSON field names and the
// text lines are the output contract of `walpost verify` (durations in
// JSON are milliseconds). Progress may be read from any goroutine while
// Run runs.
package verify
