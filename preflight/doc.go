// Package preflight is walpost check: it verifies that PostgreSQL and Kafka
// are ready for walpost run, one check at a time, and says how to fix what
// is not.
//
// Run runs the checks in a fixed order and returns a Result with one Check
// per check. Each check is OK, FAIL (Detail names the problem and the fix),
// SKIP (an earlier failure makes it moot; Detail says which) or WARN (it
// passed, but Detail names a setting that puts a guarantee at risk; not a
// failure). Run never
// stops early: every check has a result, so the output always has eleven
// lines. Catalog reads go through replication's catalog queries, and the
// slot, publication and table checks include the very ones walpost run
// makes at start-up (replication.CheckSlot, CheckPublication,
// CheckColumns); some checks here are stricter. The Kafka client is built by
// internal/kafkaconf.NewClient, so TLS and SASL settings apply.
//
// # Output and exit code
//
// Check.WriteText prints a check as one line: the status padded to six
// columns, the name padded to fourteen, a space and the detail:
//
//	OK    wal_level      logical
//	FAIL  topic          topic does not exist: "outbox": fix: create it (…)
//	SKIP  publication    outbox table missing
//
// Run writes each line as soon as its check is done; Result.WriteText
// writes them all again. walpost check prints the lines on stdout and
// exits 1 when Result.Failed is not 0 (with "N check(s) failed" on
// stderr), 0 otherwise; an invalid configuration exits 1 before any check.
// Details have PostgreSQL passwords redacted. integration/check_test.go
// asserts the lines and the exit codes.
//
// # The checks, in order
//
// PostgreSQL, through postgres.url:
//
//   - postgres: a connection within 10 s. OK names host, port, database,
//     role and server version. On FAIL (the cause, explained, and the
//     settings to check) the eight checks after it are SKIP "no
//     PostgreSQL connection". A server older than PostgreSQL 14 is FAIL
//     naming its version, and the eight are SKIP "PostgreSQL N is not
//     supported". The queries after the connection are bounded
//     by the caller's context only.
//   - wal_level: the server's wal_level is logical.
//   - replication: the role has REPLICATION (or is a superuser); on RDS or
//     Aurora membership in rds_replication is enough.
//
// On a managed service (detected by a setting only it defines:
// rds.logical_replication or the role rds_replication for RDS/Aurora,
// cloudsql.logical_decoding for Cloud SQL, azure.replication_support or
// azure.extensions for Azure) the fixes of wal_level and replication name
// the service's own flag or role instead of ALTER SYSTEM and ALTER ROLE …
// REPLICATION (managed.go).
//   - outbox: postgres.table exists, has the columns walpost reads
//     (replication.RequiredColumns), and its idempotency_key is NOT NULL
//     and UNIQUE on its own (a non-partial unique index on that one
//     column), since consumers deduplicate on it.
//   - publication: SKIP "outbox table missing" when postgres.table does
//     not exist. Otherwise postgres.publication exists, is not FOR ALL
//     TABLES, covers exactly the outbox table and publishes inserts and
//     nothing else (no update, delete or truncate).
//   - slot: OK when postgres.slot does not exist yet (walpost run creates
//     it). An existing slot must not be lost, must be logical, use pgoutput
//     and belong to the connection's database; OK shows its wal_status,
//     confirmed_flush_lsn, whether a backend streams from it and, on
//     PostgreSQL 17+, whether it is a failover slot (walpost run creates
//     one on a primary). WARN instead of OK for a failover slot (existing
//     or to be created) on a primary that physical standbys stream from
//     while synchronized_standby_slots is empty.
//     A missing slot with a recorded position is SKIP (see position).
//   - position: walpost_position's row for the slot against the server
//     (IDENTIFY_SYSTEM on a replication connection) and the slot, the
//     check walpost run makes before it may create a slot
//     (position.Check): FAIL for a missing or invalidated slot after a
//     recorded position (the gap's LSN and commit time, and the fix), for
//     another system identifier, or for a missing table; OK shows the
//     position and whether run will skip what the slot re-sends.
//   - capacity: a free replication slot when the slot does not exist yet
//     (max_replication_slots), and a free WAL sender (max_wal_senders
//     against pg_stat_replication). OK shows both as used/max.
//   - poison_table: postgres.poison_table exists (walpost migrate creates
//     it), has every column walpost writes with a type it can write
//     (poison.CheckTable; FAIL names the column and the ALTER TABLE that
//     fixes it) and a unique key on exactly (outbox_id, commit_lsn) and on
//     nothing else (FAIL: run walpost migrate). walpost run makes the same
//     check at the start of every session and exits 1 on it.
//
// Kafka, through kafka.brokers, whatever PostgreSQL's outcome:
//
//   - kafka: the client's options load (TLS files, SASL) and a broker
//     answers a metadata request within 10 s. On FAIL the
//     topic check is SKIP "no Kafka client" or "Kafka unreachable".
//   - topic: kafka.topic exists; OK shows its partition count and
//     max.message.bytes. A missing topic is OK when
//     kafka.create_topic_partitions is above 0 (walpost run creates it),
//     FAIL otherwise.
package preflight
