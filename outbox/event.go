// Package outbox defines the event walpost moves: one inserted row of the
// outbox table together with the transaction that committed it. The
// replication package produces events, sinks and the poison package consume
// them; only the forwarder joins the two sides.
package outbox

import (
	"time"

	"github.com/jackc/pglogrepl"
)

// Event is one outbox insert, decoded from the WAL.
//
// Byte slices are owned by the event (copied out of the replication
// buffer) and must not be modified.
type Event struct {
	// Row columns, as PostgreSQL rendered them in text format.
	ID             string // outbox.id
	IdempotencyKey string // outbox.idempotency_key: the Kafka key
	Payload        []byte // outbox.payload, jsonb text; nil when NULL
	CreatedAt      string // outbox.created_at, PostgreSQL text format
	Topic          string // outbox.topic; "" when NULL
	PartitionKey   string // outbox.partition_key
	HasPartition   bool   // partition_key is not NULL
	EventType      string // outbox.event_type; "" when NULL
	Headers        []byte // outbox.headers, jsonb text; nil when NULL

	// Placed holds the columns the mapping places beyond walpost's own
	// (Debezium layout); nil without them, so walpost's event does not
	// grow.
	Placed *Placed

	// Precomputed header texts (optional; the sink computes them when
	// empty): created_at as RFC 3339 and the commit LSN as X/X.
	CreatedAtRFC3339 string
	CommitLSNText    string

	// Transaction context.
	XID        uint32
	CommitLSN  pglogrepl.LSN // start of the commit record (Begin.FinalLSN)
	CommitTime time.Time     // transaction commit timestamp
	Seq        int           // position of the insert within its transaction, from 0

	// ReceivedAt is when walpost read the event from the slot (the start
	// of its produce latency); zero when not read from a slot.
	ReceivedAt time.Time
	// SentAt is when the server sent the event (the replication message's
	// send time), by the server's clock as CommitTime: SentAt minus
	// CommitTime is how far behind its commit the stream read it, whatever
	// the two hosts' clocks say. Zero when not read from a slot.
	SentAt time.Time

	// Replayed marks an event re-sent from the poison table (walpost
	// poison replay); its record carries the header replayed_from_poison.
	Replayed bool
	// Recovered marks an event read from the outbox table by walpost
	// recover (a gap of a lost slot), not from the WAL; its record carries
	// the header walpost_recovered.
	Recovered bool
	// Resent marks an event read from the outbox table by walpost resend
	// (a re-drive of rows already streamed); its record carries the
	// header walpost_resent.
	Resent bool
}

// Placed are the mapped columns beyond walpost's own.
type Placed struct {
	// HeaderValues are the texts of the columns placed as headers
	// (mapping.header_columns), in that order; nil for NULL.
	HeaderValues [][]byte
	// Trace is the text of the tracing column (mapping.tracing_column);
	// nil for NULL or without the column.
	Trace []byte
	// Timestamp, when not zero, is the record timestamp
	// (mapping.timestamp_column); zero: the commit time.
	Timestamp time.Time
}

// Size is the approximate number of bytes the event holds in memory, used to
// bound in-flight data.
func (e *Event) Size() int {
	n := 160 + len(e.ID) + len(e.IdempotencyKey) + len(e.Payload) + len(e.CreatedAt) +
		len(e.Topic) + len(e.PartitionKey) + len(e.EventType) + len(e.Headers)
	if e.Placed != nil {
		n += 48
		for _, v := range e.Placed.HeaderValues {
			n += 24 + len(v)
		}
		n += len(e.Placed.Trace)
	}
	return n
}
