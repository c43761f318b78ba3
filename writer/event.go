package writer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Event is one outbox row.
type Event struct {
	// Key is the idempotency_key: the Kafka record's key and the consumers'
	// deduplication key. Required. Make it before the transaction with
	// NewKey or DeriveKey and reuse it on every retry of the same work.
	Key string
	// Payload is the record's value: one JSON value, stored as jsonb.
	// Required. PostgreSQL renders jsonb in its own form (key order and
	// spacing normalised), and that form is what walpost sends.
	Payload json.RawMessage
	// Topic is the Kafka topic; empty writes NULL, which sends the record to
	// walpost's kafka.topic.
	Topic string
	// PartitionKey chooses the partition (Kafka's murmur2 of it); empty
	// writes NULL, which partitions by Key.
	PartitionKey string
	// EventType becomes the record's event_type header; empty writes NULL
	// and the record has no event_type header.
	EventType string
	// Headers become record headers after walpost's own, sorted by name;
	// nil or empty writes NULL. A context from WithTraceContext adds
	// traceparent and tracestate unless Headers hold a traceparent.
	Headers map[string]string
}

// ErrInvalidEvent is matched (errors.Is) by every *EventError: an event
// refused before the database saw it.
var ErrInvalidEvent = errors.New("invalid outbox event")

// EventError is an event the writer refused before sending anything. The
// transaction is left as it was.
type EventError struct {
	// Index is the event's position in the batch (0 for Insert).
	Index int
	// Key is the event's idempotency key, possibly empty.
	Key string
	// Field is the column at fault: idempotency_key, payload, topic,
	// partition_key, event_type or headers.
	Field string
	// Reason says what is wrong, never quoting the payload.
	Reason string
}

func (e *EventError) Error() string {
	return fmt.Sprintf("outbox event %d (idempotency_key %q): %s: %s", e.Index, e.Key, e.Field, e.Reason)
}

// Is reports whether target is ErrInvalidEvent.
func (e *EventError) Is(target error) bool { return target == ErrInvalidEvent }

// reservedHeaders are the headers walpost sets on every record itself; a
// row header of one of these names would be dropped.
var reservedHeaders = []string{"idempotency_key", "outbox_id", "commit_lsn", "created_at", "event_type", "replayed_from_poison"}

// row is an event as the six column values, NULL as nil.
type row [6]any

// columns are the outbox columns the writer fills, in row order.
var columns = []string{"idempotency_key", "payload", "topic", "partition_key", "event_type", "headers"}

// encode checks ev and returns its column values.
func encode(i int, ev Event) (row, error) {
	bad := func(field, reason string) (row, error) {
		return row{}, &EventError{Index: i, Key: ev.Key, Field: field, Reason: reason}
	}
	if ev.Key == "" {
		return bad("idempotency_key", "empty: set it with NewKey or DeriveKey before the transaction")
	}
	for _, f := range []struct{ name, v string }{
		{"idempotency_key", ev.Key}, {"topic", ev.Topic}, {"partition_key", ev.PartitionKey}, {"event_type", ev.EventType},
	} {
		if r := badText(f.v); r != "" {
			return bad(f.name, r)
		}
	}
	if len(ev.Payload) == 0 {
		return bad("payload", "empty: a JSON value is required (the column is jsonb NOT NULL)")
	}
	if !json.Valid(ev.Payload) {
		return bad("payload", "not valid JSON: "+jsonProblem(ev.Payload))
	}
	if !utf8.Valid(ev.Payload) {
		return bad("payload", "not valid UTF-8 (PostgreSQL refuses it)")
	}
	r := row{ev.Key, string(ev.Payload), nullable(ev.Topic), nullable(ev.PartitionKey), nullable(ev.EventType), nil}
	if len(ev.Headers) > 0 {
		for name, v := range ev.Headers {
			switch {
			case name == "":
				return bad("headers", "a header with an empty name")
			case isReserved(name):
				return bad("headers", fmt.Sprintf("header %q is set by walpost itself; the row's would be dropped", name))
			}
			if rs := badText(name); rs != "" {
				return bad("headers", fmt.Sprintf("header name %q: %s", name, rs))
			}
			if rs := badText(v); rs != "" {
				return bad("headers", fmt.Sprintf("header %q: %s", name, rs))
			}
		}
		b, err := json.Marshal(ev.Headers)
		if err != nil { // a map of valid strings always marshals
			return bad("headers", err.Error())
		}
		r[5] = string(b)
	}
	return r, nil
}

func isReserved(name string) bool {
	for _, h := range reservedHeaders {
		if name == h {
			return true
		}
	}
	return false
}

// badText says why PostgreSQL would refuse s as text, or "".
func badText(s string) string {
	switch {
	case !utf8.ValidString(s):
		return "not valid UTF-8 (PostgreSQL refuses it)"
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL byte (PostgreSQL refuses it in text)"
	}
	return ""
}

// jsonProblem describes why b is not JSON, with the byte offset.
func jsonProblem(b []byte) string {
	var v any
	err := json.Unmarshal(b, &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%v (at byte %d)", se, se.Offset)
	}
	if err != nil {
		return err.Error()
	}
	return "rejected by encoding/json"
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// encodeBatch checks every event, and that no key appears twice.
// With tc, each event's headers get its trace context.
func encodeBatch(tc *traceContext, evs []Event) ([]row, error) {
	rows := make([]row, len(evs))
	seen := make(map[string]int, len(evs))
	for i, ev := range evs {
		ev.Headers = tc.headers(ev.Headers)
		r, err := encode(i, ev)
		if err != nil {
			return nil, err
		}
		if j, dup := seen[ev.Key]; dup {
			return nil, &EventError{Index: i, Key: ev.Key, Field: "idempotency_key",
				Reason: fmt.Sprintf("the same key as event %d of the batch: one key is one event", j)}
		}
		seen[ev.Key] = i
		rows[i] = r
	}
	return rows, nil
}
