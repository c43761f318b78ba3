package replication

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

func debeziumStream(cols Columns, names ...string) *Stream {
	m := &pglogrepl.RelationMessage{RelationID: 9, Namespace: "public", RelationName: "outboxevent"}
	for _, n := range names {
		m.Columns = append(m.Columns, &pglogrepl.RelationMessageColumn{Name: n})
	}
	s := &Stream{layout: cols.resolve()}
	s.rels = map[uint32]*relation{9: newRelationFor(m, s.lay())}
	s.begin = pglogrepl.BeginMessage{FinalLSN: 0x16B3748, CommitTime: time.Unix(1700000000, 0), Xid: 42}
	return s
}

// TestDebeziumColumns: under the debezium layout the id fills ID and
// IdempotencyKey, aggregateid the key (PartitionKey), aggregatetype the
// topic; walpost's own columns are not read, the placed columns are.
func TestDebeziumColumns(t *testing.T) {
	s := debeziumStream(Columns{Debezium: true, Headers: []string{"type", "tenant"}, Timestamp: "occurred_at"},
		"id", "aggregatetype", "aggregateid", "type", "payload", "created_at", "tenant", "occurred_at")
	data := buildInsert(9, []byte("0b6f9c1e-0000-4000-8000-000000000001"), []byte("Order"), []byte("42"),
		[]byte("OrderCreated"), []byte(`{"a": 1}`), []byte("2026-11-29 22:50:51+00"), nil, []byte("2026-11-29 22:50:00.5+00"))
	ev, err := s.insertEvent(data, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ev.ID != "0b6f9c1e-0000-4000-8000-000000000001" || ev.IdempotencyKey != ev.ID || ev.PartitionKey != "42" || !ev.HasPartition ||
		ev.Topic != "Order" || string(ev.Payload) != `{"a": 1}` || ev.CreatedAt != "" || ev.EventType != "" || ev.Headers != nil {
		t.Fatalf("event %+v: want id in ID and IdempotencyKey, aggregateid in PartitionKey, aggregatetype in Topic, walpost's columns unread", ev)
	}
	if ev.Placed == nil || len(ev.Placed.HeaderValues) != 2 || string(ev.Placed.HeaderValues[0]) != "OrderCreated" || ev.Placed.HeaderValues[1] != nil {
		t.Fatalf("placed %+v: want headers OrderCreated and NULL", ev.Placed)
	}
	if want := time.Date(2026, 11, 29, 22, 50, 0, 5e8, time.UTC); !ev.Placed.Timestamp.Equal(want) {
		t.Fatalf("timestamp %s, want %s", ev.Placed.Timestamp, want)
	}
	// The tracing column sits between the header columns and the
	// timestamp in Placed; NULL is nil.
	s = debeziumStream(Columns{Debezium: true, Headers: []string{"type"}, Tracing: "tracingspancontext", Timestamp: "occurred_at"},
		"id", "aggregatetype", "aggregateid", "tracingspancontext", "type", "payload", "occurred_at")
	ev, err = s.insertEvent(buildInsert(9, []byte("x"), []byte("T"), []byte("k"), []byte("traceparent=00-a-b-01\n"),
		[]byte("OrderCreated"), []byte("{}"), []byte("2026-11-29 22:50:00+00")), 1)
	if err != nil || ev.Placed == nil || string(ev.Placed.Trace) != "traceparent=00-a-b-01\n" ||
		len(ev.Placed.HeaderValues) != 1 || string(ev.Placed.HeaderValues[0]) != "OrderCreated" || ev.Placed.Timestamp.IsZero() {
		t.Fatalf("%v, placed %+v: want the tracing column's text in Trace beside the header and the timestamp", err, ev.Placed)
	}
	ev, err = s.insertEvent(buildInsert(9, []byte("x"), []byte("T"), []byte("k"), nil, nil, []byte("{}"), nil), 1)
	if err != nil || ev.Placed == nil || ev.Placed.Trace != nil {
		t.Fatalf("%v, placed %+v: want a NULL tracing column as nil", err, ev.Placed)
	}
	// Without placed columns the event carries none.
	s = debeziumStream(Columns{Debezium: true}, "id", "aggregatetype", "aggregateid", "payload")
	ev, err = s.insertEvent(buildInsert(9, []byte("x"), []byte("T"), nil, []byte("{}")), 1)
	if err != nil || ev.Placed != nil || ev.HasPartition {
		t.Fatalf("%v, %+v: want no Placed and a NULL key", err, ev)
	}
}

// TestMappedColumnMissing: a required column missing from the relation
// names the mapping key that names it and its variable.
func TestMappedColumnMissing(t *testing.T) {
	cases := []struct {
		cols       Columns
		names      []string
		column, in string
	}{
		{Columns{Debezium: true}, []string{"id", "aggregatetype", "payload"}, "aggregateid", "mapping.key_column (WALPOST_MAPPING_KEY_COLUMN)"},
		{Columns{Debezium: true, Key: "entity"}, []string{"id", "aggregatetype", "aggregateid", "payload"}, "entity", "mapping.key_column"},
		{Columns{Debezium: true, Topic: "kind"}, []string{"id", "aggregatetype", "aggregateid", "payload"}, "kind", "mapping.topic_column"},
		{Columns{Debezium: true, Headers: []string{"trace"}}, []string{"id", "aggregatetype", "aggregateid", "payload"}, "trace", "mapping.header_columns"},
		{Columns{Debezium: true, Tracing: "tracingspancontext"}, []string{"id", "aggregatetype", "aggregateid", "payload"}, "tracingspancontext", "mapping.tracing_column (WALPOST_MAPPING_TRACING_COLUMN)"},
		{Columns{Payload: "body"}, []string{"id", "idempotency_key", "payload", "created_at"}, "body", "mapping.payload_column"},
		{Columns{}, []string{"id", "payload", "created_at"}, "idempotency_key", "(required: [id idempotency_key payload created_at])"},
	}
	for _, c := range cases {
		s := debeziumStream(c.cols, c.names...)
		err := s.rels[9].check()
		if !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), `no column "`+c.column+`"`) || !strings.Contains(err.Error(), c.in) {
			t.Errorf("%+v with %v: %v; want ErrSchema naming %q and %s", c.cols, c.names, err, c.column, c.in)
		}
	}
}
