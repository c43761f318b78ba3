// Package recovery is `walpost recover`: it closes the gap a lost slot left
// behind (DESIGN.md, "Recovery"; README, Runbook, "Slot lost").
//
// A slot that was dropped or invalidated took with it the WAL of every
// transaction after walpost's recorded position (walpost_position). The
// rows of those transactions are still in the outbox table, unless an
// application deleted them. Recover:
//
//  1. marks the position row (position.Store.MarkRecovering), so a walpost
//     run refuses the slot until the recovery finished;
//  2. creates the slot on a replication connection with an exported
//     snapshot (CREATE_REPLICATION_SLOT … LOGICAL pgoutput EXPORT_SNAPSHOT):
//     everything committed before the slot's consistent point is visible
//     in the snapshot, everything after it is streamed by the slot;
//  3. reads, in that snapshot (a REPEATABLE READ transaction with SET
//     TRANSACTION SNAPSHOT on another connection, while the creating
//     connection stays open and idle: any command on it would destroy the
//     snapshot), the outbox rows committed after the recorded position,
//     chosen by commit timestamp when track_commit_timestamp is on, else by
//     created_at minus recover.margin; every row of the table when the
//     recorded position confirmed no transaction yet;
//  4. produces them in that order through the sink (walpost's idempotent
//     Kafka producer), each record marked walpost_recovered, and waits for
//     every acknowledgement; in exactly-once mode (only with
//     Options.AllowDuplicates: read_committed consumers see the re-sent
//     rows twice) through the slot's transactional producer, in Kafka
//     transactions of at most delivery.transaction_records records, the
//     last of which commits the slot's checkpoint at the new slot's
//     consistent point, so that the checkpoint topic no longer names a
//     position ahead of the row reset in step 5 (a restored server's),
//     which walpost run would skip up to;
//  5. replaces the row with the new slot's consistent point
//     (position.Store.Reset), which clears the mark.
//
// INV-7 holds across it: no row committed before the consistent point is
// missed (unless deleted), none after it is produced by recover, and the
// rows of the margin are sent again and counted in the report.
package recovery
