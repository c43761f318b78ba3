// Package status is what walpost status reports: the replication slot, the
// publication, the outbox table, the poison table and the Kafka topic of
// one configuration, read once.
//
// Gather reads a Report; WriteText renders it for people and WriteJSON as
// the JSON of walpost status --json, which scripts and monitoring read:
// that JSON is a contract, pinned by testdata/status*.json.golden, and a
// change to those files is a change of the contract.
//
// # Reading
//
// Gather reads PostgreSQL and Kafka side by side, each within 10 s, and
// waits for both. It returns an error only when PostgreSQL cannot be used
// at all: postgres.url does not parse, no connection within the timeout,
// or the first query fails. Every other problem is reported in the
// section it concerns: the section's error says why, and the values it
// could not read are null. A report therefore always has every section.
// Catalog reads go through replication's catalog queries, the same ones
// walpost run's start-up checks use; Kafka clients are built by
// internal/kafkaconf.NewClient, so TLS and SASL settings apply.
//
// Messages that come from PostgreSQL have connection-string passwords
// redacted.
//
// # JSON fields
//
// Every key is always present; a value that is unknown is null, not
// omitted. LSNs are strings as PostgreSQL prints them ("3/1A2B3F00"). Byte
// counts are integers in bytes. Arrays are never null unless stated.
//
// postgres — the server of postgres.url:
//
//   - database: current_database().
//   - version: the server_version setting, as the server prints it
//     ("17.2", "15.18 (Debian 15.18-0+deb12u1)").
//   - in_recovery: pg_is_in_recovery(); true on a standby.
//   - current_wal_lsn: pg_current_wal_lsn(), or on a standby
//     pg_last_wal_replay_lsn(). Lag and retained WAL are measured from it.
//     Null only when a standby reports no replayed position.
//
// slot — the replication slot postgres.slot, a row of pg_replication_slots:
//
//   - name: postgres.slot.
//   - exists: the slot exists. When false every other field but
//     safe_wal_unlimited (false) is null and error says walpost run
//     creates it.
//   - slot_type: "logical" or "physical".
//   - plugin, database: the output plugin and the database; null for a
//     physical slot.
//   - active: a process is streaming from the slot.
//   - active_pid: that process's backend pid; null when inactive.
//   - confirmed_flush_lsn: the position the consumer has confirmed; WAL
//     before it will not be sent again. Null for a physical slot.
//   - restart_lsn: the oldest WAL the slot keeps; null when it keeps none
//     (a lost slot, a physical slot that never reserved WAL).
//   - lag_bytes: current_wal_lsn − confirmed_flush_lsn, the WAL not yet
//     confirmed. Null when either is null.
//   - retained_wal_bytes: current_wal_lsn − restart_lsn, the WAL the slot
//     keeps on disk. Null when either is null. Read in the same query as
//     lag_bytes, so retained_wal_bytes − lag_bytes is exactly
//     confirmed_flush_lsn − restart_lsn.
//   - wal_status: reserved, extended, unreserved (the WAL exceeds
//     max_slot_wal_keep_size and may be removed at the next checkpoint)
//     or lost (it was: the slot can no longer be used). Null for a slot
//     that never reserved WAL.
//   - safe_wal_size_bytes: bytes of WAL that may still be written before
//     the slot is in danger of being lost. Null when the slot is lost or
//     max_slot_wal_keep_size is -1.
//   - safe_wal_unlimited: max_slot_wal_keep_size is -1, so PostgreSQL keeps
//     the slot's WAL without limit; false when the slot does not exist.
//   - failover: a failover slot, copied to standbys that have
//     sync_replication_slots = on (walpost run creates one on a primary of
//     PostgreSQL 17+). Null before 17.
//   - synced: this slot is such a copy, on a standby. Null before 17.
//   - error: why the slot could not be read, or that it does not exist;
//     null otherwise.
//
// publication — postgres.publication, a row of pg_publication:
//
//   - name: postgres.publication.
//   - exists: the publication exists.
//   - all_tables: FOR ALL TABLES; null when the publication does not
//     exist or could not be read.
//   - tables: the tables it covers as schema.table, unquoted, sorted;
//     every table for FOR ALL TABLES; [] when none or unknown.
//   - operations: the operations published, a subset of insert, update,
//     delete, truncate in that order; [] when none or unknown.
//   - error: that the publication does not exist, or why it could not be
//     read (exists false), or why its tables could not be read (exists,
//     all_tables and operations are then known, tables is []).
//
// outbox — the outbox table postgres.table:
//
//   - table: the table resolved as schema.table, unquoted; the configured
//     name when it does not resolve.
//   - row_estimate: an estimate of the row count from the statistics, not a
//     count: pg_stat_user_tables.n_live_tup when the statistics collector
//     has a row for the table, else pg_class.reltuples once VACUUM or
//     ANALYZE has run. Null when neither is known.
//   - row_estimate_source: "pg_stat_user_tables.n_live_tup" or
//     "pg_class.reltuples"; null with row_estimate.
//   - error: why the table could not be resolved or estimated; null
//     otherwise.
//
// poison — the poison table postgres.poison_table:
//
//   - table: postgres.poison_table as configured.
//   - pending: quarantined events not replayed yet (replayed_at is null).
//   - replayed: quarantined events replayed since.
//   - error: the table does not exist (run walpost migrate) or could not be
//     read; pending and replayed are then null.
//
// kafka — the default topic kafka.topic:
//
//   - brokers: kafka.brokers as configured; [] when unset (error says so).
//   - topic: kafka.topic.
//   - partitions: the topic's partition count; null when Kafka is
//     unreachable, the topic does not exist or could not be described.
//   - end_offsets: one entry per partition, in partition order: partition,
//     end_offset (the offset the next record will get) and error (why that
//     partition returned none; end_offset is then null). Null when
//     partitions is null or the end offsets could not be listed.
//   - end_offset_sum: the sum of the end offsets, every record ever written
//     to the topic by walpost or anyone else; null unless every partition
//     returned one.
//   - error: why the topic could not be read; null otherwise.
//
// notes — problems worth acting on, in this order, [] when there are none:
// the slot is unusable by walpost (lost, not logical, not pgoutput, another
// database); the slot exists but is inactive, so PostgreSQL keeps its WAL
// until a walpost streams from it; wal_status is unreserved; the
// publication does not fit the outbox table (covers another table, misses
// it, FOR ALL TABLES, no inserts); events are quarantined and not
// replayed. Each note starts with the section it concerns ("slot: ",
// "publication: ", "poison: ") and names the fix.
//
// # Text
//
// WriteText prints one block per section with "-" for what could not be
// read, the section's error, and the notes last; byte counts are exact with
// a binary-unit rendering beside them from 1 KiB up ("19087320 B (18.2
// MiB)"). It is for people; scripts read the JSON.
package status
