// Package sink is the contract between walpost's pipeline and a
// destination, in the words of CockroachDB's changefeed sinks:
//
//   - Produce is asynchronous: it enqueues one event and returns; the
//     event's outcome is reported exactly once to its Acker, nil on the
//     destination's acknowledgement. Produce never blocks for long (the
//     pipeline bounds what is in flight) and never drops an event without
//     reporting it.
//   - Flush blocks until every event produced before the call has an
//     outcome, or ctx ends.
//   - Close releases the sink; it promises nothing about events without an
//     outcome (they may or may not have been delivered, and their Ackers
//     may be called with an error).
//
// Ackers run on the sink's own goroutines and must never block: they only
// record outcomes.
//
// A failed outcome is classified by behaviour, not by the destination's
// error codes: the sink wraps it in an *Error whose Kind says what the
// pipeline does with the event (KindOf reads it): retry the session
// (Transient), isolate and eventually quarantine the record (Record), or
// stop forwarding until an operator fixes the destination (Destination,
// Unknown).
//
// Invariant INV-3 (DESIGN.md): a sink keeps the order in which Produce was
// called for the events of one partition.
//
// The Kafka implementation lives in sink/kafka; Discard acknowledges every
// event at once (benchmarks, tests).
package sink
