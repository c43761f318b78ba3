package replication

import (
	"fmt"
	"strings"
)

// Columns names the outbox columns the stream reads (the config's
// mapping.* keys, README "Configuration"). The zero value is walpost's
// layout with its default names.
//
// In the Debezium layout the id column fills both Event.ID and
// Event.IdempotencyKey (consumers deduplicate on the id header), the key
// column fills Event.PartitionKey (Debezium partitions by the record key,
// and the poison table keeps it in partition_key, so a replay has it), and
// walpost's created_at, partition_key, event_type and headers columns are
// not read.
type Columns struct {
	Debezium bool
	// ID, Key, Payload, Topic: the mapped names; "" is walpost's default
	// (id, idempotency_key, payload, topic).
	ID, Key, Payload, Topic string
	// Headers are the columns of mapping.header_columns, in order: their
	// text fills Event.HeaderValues (Debezium layout only).
	Headers []string
	// Timestamp is mapping.timestamp_column (Debezium layout only); ""
	// keeps the commit time.
	Timestamp string
	// Tracing is mapping.tracing_column (Debezium layout only): its text
	// fills Placed.Trace; "" reads none.
	Tracing string
}

// layout is Columns resolved: the column name of each slot of the event
// ("" not read), the mapping key that names it (for errors), whether it
// is required, and the extra columns (headers, then the tracing column,
// then the timestamp).
type layout struct {
	names    [numCols]string
	keys     [numCols]string
	required [numCols]bool
	extra    []string
	extraKey []string
	hasTrace bool // extra holds the tracing column after the headers
	hasTS    bool // extra ends with the timestamp column
}

// walpostLayout is the layout of the zero Columns.
var walpostLayout = Columns{}.layout()

// resolve is c's layout.
func (c Columns) resolve() *layout {
	l := c.layout()
	return &l
}

// lay is the stream's layout.
func (s *Stream) lay() *layout {
	if s.layout == nil {
		return &walpostLayout
	}
	return s.layout
}

func or(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

func (c Columns) layout() layout {
	var l layout
	id, key, payload, topic := or(c.ID, "id"), or(c.Key, "idempotency_key"), or(c.Payload, "payload"), or(c.Topic, "topic")
	if !c.Debezium {
		l.names = [numCols]string{id, key, payload, "created_at", topic, "partition_key", "event_type", "headers"}
		// A renamed column is named with its mapping key; walpost's own
		// names keep the message that points to walpost migrate.
		for j, k := range [...]string{colID: "mapping.id_column", colKey: "mapping.key_column", colPayload: "mapping.payload_column", colTopic: "mapping.topic_column"} {
			if k != "" && l.names[j] != [numCols]string{"id", "idempotency_key", "payload", "", "topic"}[j] {
				l.keys[j] = k
			}
		}
		l.required = [numCols]bool{colID: true, colKey: true, colPayload: true, colCreatedAt: true}
		return l
	}
	if c.Key == "" {
		key = "aggregateid"
	}
	if c.Topic == "" {
		topic = "aggregatetype"
	}
	l.names = [numCols]string{colID: id, colKey: id, colPayload: payload, colTopic: topic, colPartitionKey: key}
	l.keys = [numCols]string{colID: "mapping.id_column", colKey: "mapping.id_column", colPayload: "mapping.payload_column", colTopic: "mapping.topic_column", colPartitionKey: "mapping.key_column"}
	l.required = [numCols]bool{colID: true, colKey: true, colPayload: true, colTopic: true, colPartitionKey: true}
	for _, h := range c.Headers {
		l.extra = append(l.extra, h)
		l.extraKey = append(l.extraKey, "mapping.header_columns")
	}
	if c.Tracing != "" {
		l.extra = append(l.extra, c.Tracing)
		l.extraKey = append(l.extraKey, "mapping.tracing_column")
		l.hasTrace = true
	}
	if c.Timestamp != "" {
		l.extra = append(l.extra, c.Timestamp)
		l.extraKey = append(l.extraKey, "mapping.timestamp_column")
		l.hasTS = true
	}
	return l
}

// Required lists the columns the outbox table must have.
func (c Columns) Required() []string {
	l := c.layout()
	var out []string
	seen := map[string]bool{}
	add := func(n string) {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	for j := 0; j < numCols; j++ {
		if l.required[j] {
			add(l.names[j])
		}
	}
	for _, n := range l.extra {
		add(n)
	}
	return out
}

// missing reports the first required column has does not contain, with
// the mapping key that names it (empty for walpost's fixed created_at).
func (l *layout) missing(has func(string) bool) (column, key string, ok bool) {
	for j := 0; j < numCols; j++ {
		if l.required[j] && !has(l.names[j]) {
			return l.names[j], l.keys[j], true
		}
	}
	for i, n := range l.extra {
		if !has(n) {
			return n, l.extraKey[i], true
		}
	}
	return "", "", false
}

// missingText names a missing column and what to do about it.
func missingText(table, column, key string, required []string) string {
	if key == "" {
		return fmt.Sprintf("table %s has no column %q (required: %v)", table, column, required)
	}
	env := "WALPOST_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
	return fmt.Sprintf("table %s has no column %q, which %s (%s) names (required: %v)", table, column, key, env, required)
}
