// Package forwarder is walpost's pipeline as a library: what `walpost run`
// runs, and what a benchmark or an application embedding walpost runs too.
//
//	f, err := forwarder.New(cfg, forwarder.Deps{Logger: logger})
//	err = f.Run(ctx) // until ctx ends (nil) or a terminal error
//
// New takes a validated *config.Config (config.Load, or config.Default
// with the connection settings filled in). Deps.Sink replaces the Kafka
// sink (sink.Discard measures the stream alone); Deps.Registry receives
// the metrics.
//
// A session is one replication connection: the stream (replication.Stream)
// hands each decoded insert to the Isolator, which produces it through the
// sink and settles the failed ones; the checkpoint.Tracker turns
// acknowledgements into the LSN confirmed to the slot. Run restarts a
// session that failed, after flushing the sink, as Classify decides:
// context first, then terminal errors, then destination errors, then an
// active slot, else a retry with jittered back-off.
//
// The Isolator: a record the sink will not take must neither stop the
// stream nor vanish.
//
//  1. On the first failed record it pauses: new events are held in order,
//     and the tracker stops the reader (status updates go on).
//  2. It waits until every produced record has an outcome (franz-go fails
//     every buffered record of a partition when one fails), then
//     re-produces the failed records one at a time, in emit order, so only
//     the guilty record stays a candidate.
//  3. A record-level failure (sink.Record) is retried up to
//     poison.max_attempts with doubling back-off, then written to the poison
//     table; only after that insert commits is the event done for the
//     watermark. A transiently failing insert is retried; the slot never
//     moves past the event meanwhile. An insert PostgreSQL refuses for good
//     (poison.ErrUnwritable) ends walpost (Classify: Fail), the event
//     unconfirmed; the session checks the poison table first (Store.Check).
//  4. Destination and unknown failures end the session with a clear error:
//     never quarantined, never confirmed past.
//  5. More than poison.max_rate quarantined events within poison.rate_window
//     trips the breaker (errBreaker): walpost stops rather than drain the
//     outbox. The window starts with the poison rows of the window
//     (isolatorConfig.Recent, read at session start), so restarts do not
//     reset it; a full window trips before another row is written.
//  6. A clean stop does not interrupt it: the session runs it on a context
//     of its own (isolatorContext) that ends when the stream has returned
//     or at the stop's deadline (kafka.flush_timeout after the stop), so
//     a record being settled is finished and its transaction confirmed;
//     a failure of another session goroutine ends it at once.
//
// Invariants (DESIGN.md) enforced here: INV-1, Done is called only after
// the ack or the committed poison row; INV-2, every event ends as a record
// or a poison row; INV-3, held events are produced in emit order after the
// failed ones are settled.
//
// Goroutines: Run owns every goroutine it starts and returns only once
// they have all returned (DESIGN.md, Goroutines and ownership).
package forwarder
