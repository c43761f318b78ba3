// Package sink produces outbox events to Kafka with an idempotent franz-go
// producer.
//
// Contract (after CockroachDB's changefeed sinks): Produce is asynchronous
// and reports each event's outcome exactly once through its callback;
// Flush waits until every produced event has an outcome; Close promises
// nothing about events without one. Callbacks run on franz-go's promise
// goroutine, serially, and must never block: they only record outcomes.
//
// Durability options are set explicitly, never left to library defaults
// (DESIGN §4): idempotent writes, acks=all, unlimited record retries, no
// delivery timeout, no idempotent produce cancellation. Transient broker
// errors (network, NOT_LEADER, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS) are
// therefore retried inside the client and never reach a callback.
//
// Invariant 3 (DESIGN §2): records of one partition are appended in the
// order Produce was called, since franz-go keeps per-partition order for an
// idempotent producer.
package sink
