package sink

import (
	"context"
	"errors"

	"github.com/walpost/walpost/outbox"
)

// Sink is a destination of outbox events; see the package comment for the
// contract of each method.
type Sink interface {
	// Produce enqueues ev and reports its outcome exactly once to a.
	Produce(ev *outbox.Event, a Acker)
	// Flush waits until every event produced so far has an outcome.
	Flush(ctx context.Context) error
	// Close releases the sink; it promises nothing about pending events.
	Close()
}

// ColumnTyped is the optional capability of a Sink whose record formats
// depend on the types of the outbox's key and payload columns (the Kafka
// sink's json formats of the Debezium profile, a bytea payload's bytes). At each session start the
// pipeline gives the types read from the table to the sink it produces
// through, before its first event; a sink without the capability needs
// none.
type ColumnTyped interface {
	// SetColumnTypes sets the key and payload columns' types; the
	// Produce calls that follow use them.
	SetColumnTypes(key, value ColumnType)
}

// ColumnType is what a sink needs of a column to encode it: its schema
// as JSON for the JSON formats (for Kafka, the Connect schema Debezium's
// PostgreSQL connector derives, kafka.ConnectType), whether its values
// are JSON numbers, and whether it is binary (bytea: the event carries
// PostgreSQL's hex text, \x…, and the record the bytes it stands for).
// The zero value is a text column that may be NULL.
type ColumnType struct {
	Schema string
	Number bool
	Binary bool
}

// Result is where the destination put an acknowledged event. Partition is
// -1 when the event never reached a partition (it could not be built, or
// it was refused before a partition was chosen).
type Result struct {
	Topic     string
	Partition int32
	Offset    int64
}

// Acker receives the outcome of one produced event: nil, or an error whose
// kind KindOf reads. It must not block.
type Acker interface {
	Acked(r Result, err error)
}

// AckFunc adapts a function to Acker.
type AckFunc func(Result, error)

// Acked calls f.
func (f AckFunc) Acked(r Result, err error) { f(r, err) }

// Kind says what a failed outcome means for the event.
type Kind int

const (
	// Transient failures (network, leadership, timeouts, a closed client)
	// end the session, which resumes from the slot. Never quarantined.
	Transient Kind = iota
	// Record failures belong to one record (too large, invalid, refused by
	// policy): the record is isolated, retried up to poison.max_attempts,
	// then quarantined.
	Record
	// Destination failures (authorization, unknown topic) stop forwarding
	// with a clear error until they are fixed; never quarantined, never
	// confirmed past.
	Destination
	// Unknown failures are treated like destination failures.
	Unknown
)

func (k Kind) String() string {
	switch k {
	case Transient:
		return "transient"
	case Record:
		return "record"
	case Destination:
		return "destination"
	default:
		return "unknown"
	}
}

// Error is a classified failure of one event: its Kind, a stable class name
// for metrics and the poison table (the destination's error name, e.g.
// MESSAGE_TOO_LARGE, or walpost's own such as INVALID_HEADERS), and the
// cause.
type Error struct {
	Kind  Kind
	Class string
	Err   error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the kind and class of a failed outcome. An error that no
// sink classified is Unknown (class UNKNOWN), except that context
// cancellation and deadlines are Transient (class CLIENT).
func KindOf(err error) (Kind, string) {
	var se *Error
	switch {
	case err == nil:
		return Transient, ""
	case errors.As(err, &se):
		return se.Kind, se.Class
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Transient, "CLIENT"
	}
	return Unknown, "UNKNOWN"
}

// ProduceSync produces ev through s and waits for its outcome or ctx. An
// event whose outcome is still pending when ctx ends stays in the sink.
func ProduceSync(ctx context.Context, s Sink, ev *outbox.Event) error {
	ch := make(chan error, 1)
	s.Produce(ev, AckFunc(func(_ Result, err error) { ch <- err }))
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Discard is a Sink that acknowledges every event at once, on the calling
// goroutine, at partition 0; benchmarks use it to measure the stream
// alone.
var Discard Sink = discard{}

type discard struct{}

func (discard) Produce(ev *outbox.Event, a Acker) {
	a.Acked(Result{Topic: ev.Topic, Partition: 0, Offset: -1}, nil)
}
func (discard) Flush(context.Context) error { return nil }
func (discard) Close()                      {}
