// Package replication reads the outbox's inserts from a PostgreSQL logical
// replication slot (pgoutput) and hands them on in commit order.
//
// catalog.go is the one place walpost reads PostgreSQL's catalog from
// (server, slot, publication, outbox table); the start-up checks here
// (Prepare), package status and package preflight all use it.
//
// One goroutine owns the replication connection (pgconn allows no other):
// Stream.Run receives with a deadline at the next status time, decodes
// behind a boundary that turns a parser panic into a *DecodeError carrying
// the LSN, and sends a standby status update every ≤ status interval, at
// once when the server asks (ReplyRequested), and when the watermark moves.
//
// Invariants (DESIGN.md) enforced here:
//
//   - INV-1: the flush position sent is the Frontier's Confirmed,
//     never the received position; Write, Flush and Apply are always set
//     explicitly (pglogrepl copies Write into a zero Flush).
//   - INV-3: events are emitted in the order pgoutput sends them:
//     commit order, insert order within a transaction.
//   - INV-4: replication starts at LSN 0, so the server resumes from
//     the slot's confirmed_flush_lsn and never past it.
//   - INV-6: when the Budget is full (or the isolator's Pause is on) the
//     stream stops reading WAL but keeps sending status updates, so
//     wal_sender_timeout never fires.
package replication
