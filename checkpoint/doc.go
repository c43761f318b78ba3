// Package checkpoint turns out-of-order acknowledgements of individual
// events into the one LSN that may be confirmed to PostgreSQL.
//
// Transactions enter a FIFO in commit order (OpenAt), receive their events
// (Add) and are closed with their end LSN (Seal). Each event is handled
// exactly once (Done): acked by Kafka or committed to poison_outbox.
// Confirmed returns the TransactionEndLSN of the longest prefix of sealed
// transactions whose events are all handled: a low watermark, never "the
// highest ack seen".
//
// Invariants (DESIGN.md), enforced here:
//
//   - INV-1: the confirmed LSN never passes an unhandled event. A
//     transaction counts only when it is sealed and every event of it and of
//     every earlier transaction is done.
//   - INV-4: the confirmed LSN only moves forward; an attempt to seal
//     or advance below it is an assertion error (ErrRegression).
//   - INV-6: in-flight events are bounded by count and bytes: a Budget
//     the reader owns, which the Tracker takes from in Add and gives back
//     in Done; Full reports when the reader must pause and Freed when
//     space frees. Pause is the isolator's own hold on the reader.
//     Transactions are bounded by events too: a sealed transaction without
//     events merges into the queued one before it (its end LSN extends
//     that one's), so a million empty transactions behind an unacknowledged
//     event take one FIFO entry.
//
// The idle advance (Idle) confirms a keepalive's ServerWALEnd only when
// nothing is in flight and no transaction is open, so a quiet outbox on a
// busy database does not pin WAL (DESIGN.md, PostgreSQL facts).
//
// Concurrency: one reader goroutine calls OpenAt, Add, Seal, Idle and
// Confirmed; Done may be called from any goroutine. The Tracker's state is
// behind one mutex, Done never blocks beyond it; the Budget and the Pause
// are atomics.
package checkpoint
