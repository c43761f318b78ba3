// Package poison quarantines events Kafka keeps refusing, and replays them.
//
// A record Kafka will not take must neither stop the stream nor vanish.
// The Isolator sits between the replication stream and the sink:
//
//  1. On the first failed record it pauses: new events are held in order,
//     and the tracker stops the reader (status updates go on).
//  2. It waits until every produced record has an outcome (franz-go fails
//     every buffered record of a partition when one fails), then
//     re-produces the failed records one at a time, in emit order, so only
//     the guilty record stays a candidate.
//  3. A record-level failure (sink.Record) is retried up to MaxAttempts with
//     doubling backoff, then written to the poison table; only after that
//     insert commits is the event done for the watermark. A failing insert
//     is retried; the slot never moves past the event meanwhile.
//  4. Destination and unknown failures end the session with a clear error:
//     never poisoned, never confirmed past.
//  5. More than MaxRate quarantined events within RateWindow trips the
//     breaker (ErrBreaker): walpost stops rather than drain the outbox.
//
// Invariants (DESIGN §2): Invariant 2, every event ends as a Kafka record or
// a poison row; Invariant 1, Done is called only after the ack or the
// committed poison row; Invariant 3, held events are produced in emit order
// after the failed ones are settled.
package poison
