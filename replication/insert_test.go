package replication

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/outbox"
)

// insertMsg builds an 'I' message for relation id with the given columns
// (nil = NULL).
func buildInsert(id uint32, cols ...[]byte) []byte {
	b := []byte{'I', 0, 0, 0, 0, 'N', 0, 0}
	binary.BigEndian.PutUint32(b[1:], id)
	binary.BigEndian.PutUint16(b[6:], uint16(len(cols)))
	for _, c := range cols {
		if c == nil {
			b = append(b, 'n')
			continue
		}
		b = append(b, 't', 0, 0, 0, 0)
		binary.BigEndian.PutUint32(b[len(b)-4:], uint32(len(c)))
		b = append(b, c...)
	}
	return b
}

func testRelation() *relation {
	m := &pglogrepl.RelationMessage{RelationID: 7, Namespace: "public", RelationName: "outbox"}
	for _, n := range []string{"id", "idempotency_key", "payload", "created_at", "sent_at", "attempts", "last_error", "topic", "partition_key", "event_type", "headers", "extra"} {
		m.Columns = append(m.Columns, &pglogrepl.RelationMessageColumn{Name: n})
	}
	return newRelation(m)
}

func testStream() *Stream {
	s := &Stream{rels: map[uint32]*relation{7: testRelation()}}
	s.begin = pglogrepl.BeginMessage{FinalLSN: 0x16B3748, CommitTime: time.Unix(1700000000, 0), Xid: 42}
	s.commitText = s.begin.FinalLSN.String()
	return s
}

// slowEvent is the event the pglogrepl path builds for the same message.
func slowEvent(t *testing.T, s *Stream, data []byte) *outbox.Event {
	msg, err := Decode(data, 1)
	if err != nil {
		t.Fatalf("pglogrepl path: %v", err)
	}
	m := msg.(*pglogrepl.InsertMessage)
	return s.event(s.rels[m.RelationID], m.Tuple)
}

func TestInsertFastPathMatchesPglogrepl(t *testing.T) {
	data := buildInsert(7,
		[]byte("0b6f9c1e-0000-4000-8000-000000000001"), []byte("key-1"), []byte(`{"a": 1}`),
		[]byte("2026-11-29 22:50:51.123456+00"), nil, []byte("0"), nil,
		[]byte("orders"), []byte("customer-7"), []byte("order.created"), []byte(`{"h": "v"}`), []byte("x"))
	s := testStream()
	s.recvAt = time.Unix(1700000001, 5)
	fast, err := s.insertEvent(data, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !fast.ReceivedAt.Equal(s.recvAt) {
		t.Fatalf("ReceivedAt %v, want the time the message was received, %v", fast.ReceivedAt, s.recvAt)
	}
	s.seq = 0
	slow := slowEvent(t, s, data)
	if fast.ID != slow.ID || fast.IdempotencyKey != slow.IdempotencyKey || string(fast.Payload) != string(slow.Payload) ||
		fast.CreatedAt != slow.CreatedAt || fast.Topic != slow.Topic || fast.PartitionKey != slow.PartitionKey ||
		fast.HasPartition != slow.HasPartition || fast.EventType != slow.EventType || string(fast.Headers) != string(slow.Headers) ||
		fast.CommitLSN != slow.CommitLSN || fast.XID != slow.XID || !fast.CommitTime.Equal(slow.CommitTime) || fast.Seq != slow.Seq {
		t.Fatalf("fast %+v\nslow %+v", fast, slow)
	}
	if fast.CreatedAtRFC3339 != "2026-11-29T22:50:51.123456Z" || fast.CommitLSNText != "0/16B3748" {
		t.Fatalf("precomputed texts %q %q", fast.CreatedAtRFC3339, fast.CommitLSNText)
	}
	// NULL optional columns stay unset.
	data2 := buildInsert(7, []byte("id"), []byte("k"), []byte("{}"), []byte("2026-01-01 00:00:00+00"), nil, nil, nil, nil, nil, nil, nil, nil)
	ev, err := s.insertEvent(data2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Topic != "" || ev.HasPartition || ev.Headers != nil || ev.EventType != "" {
		t.Fatalf("NULLs decoded as %+v", ev)
	}
}

func TestInsertFastPathRejectsMalformed(t *testing.T) {
	good := buildInsert(7, []byte("id"), []byte("k"), []byte("{}"), []byte("2026-01-01 00:00:00+00"), nil, nil, nil, nil, nil, nil, nil, nil)
	s0 := testStream()
	if _, err := s0.insertEvent(good, 1); err != nil {
		t.Fatalf("the well-formed insert the cases below break: %v", err)
	}
	s := testStream()
	for i := 0; i < len(good); i++ {
		if _, err := s.insertEvent(good[:i], 1); err == nil {
			t.Fatalf("truncated to %d bytes: no error", i)
		}
	}
	bad := append([]byte(nil), good...)
	binary.BigEndian.PutUint32(bad[1:], 99)
	if _, err := s.insertEvent(bad, 1); err == nil {
		t.Fatal("unknown relation: no error")
	}
	huge := append([]byte(nil), good...)
	binary.BigEndian.PutUint32(huge[9:], 1<<31) // first column's length
	if _, err := s.insertEvent(huge, 1); err == nil {
		t.Fatal("oversized length: no error")
	}
}

// TestInsertColumnsNeverSilentlyNULL: an unchanged-TOAST ('u') or binary
// ('b') column, and a tuple whose column count differs from the relation's,
// are decode errors carrying the LSN and naming the column or the counts;
// before, each read as NULL (an event without its topic, partition key or
// payload).
func TestInsertColumnsNeverSilentlyNULL(t *testing.T) {
	row := func(edit func([]tupleCol) []tupleCol) []byte {
		cols := []tupleCol{
			text("0b6f9c1e-0000-4000-8000-000000000001"), text("key-1"), text(`{"a": 1}`),
			text("2026-11-29 22:50:51.123456+00"), null, text("0"), null,
			text("orders"), text("customer-7"), text("order.created"), text(`{"h": "v"}`), text("x"),
		}
		return msgInsert(7, edit(cols))
	}
	set := func(i int, c tupleCol) func([]tupleCol) []tupleCol {
		return func(cols []tupleCol) []tupleCol { cols[i] = c; return cols }
	}
	tests := []struct {
		name string
		data []byte
		want []string // substrings of the error
	}{
		{"unchanged TOAST payload", row(set(2, tupleCol{kind: 'u'})), []string{`"payload"`, "unchanged TOAST", "public.outbox"}},
		{"unchanged TOAST partition_key", row(set(8, tupleCol{kind: 'u'})), []string{`"partition_key"`, "unchanged TOAST"}},
		{"unchanged TOAST in a column walpost does not read", row(set(11, tupleCol{kind: 'u'})), []string{`"extra"`, "unchanged TOAST"}},
		{"binary topic", row(set(7, tupleCol{'b', "orders"})), []string{`"topic"`, "binary format"}},
		{"binary id", row(set(0, tupleCol{'b', "\x00\x01"})), []string{`"id"`, "binary format"}},
		{"fewer columns than the relation", row(func(c []tupleCol) []tupleCol { return c[:8] }), []string{"8 columns", "relation message 12"}},
		{"more columns than the relation", row(func(c []tupleCol) []tupleCol { return append(c, text("y")) }), []string{"13 columns", "relation message 12"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := testStream()
			const lsn = pglogrepl.LSN(0x16B3790)
			ev, err := s.insertEvent(tc.data, lsn)
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("insertEvent = %+v, %v; want a *DecodeError", ev, err)
			}
			if de.LSN != lsn || !strings.Contains(err.Error(), lsn.String()) {
				t.Errorf("error %q carries LSN %s, want %s", err, de.LSN, lsn)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if !IsTerminal(err) {
				t.Errorf("IsTerminal(%v) = false: the stream would reconnect into the same message", err)
			}
		})
	}
}

// FuzzInsert: the fast path never panics, and whenever pglogrepl decodes
// an Insert of the relation, the fast path yields the same columns.
func FuzzInsert(f *testing.F) {
	f.Add(buildInsert(7, []byte("id"), []byte("k"), []byte("{}"), []byte("2026-01-01 00:00:00+00"), nil, nil, nil, []byte("t"), []byte("p"), []byte("e"), []byte(`{"a":"b"}`), []byte("x")))
	f.Add(buildInsert(7, []byte("id"), nil))
	f.Add([]byte{'I', 0, 0, 0, 7, 'N', 0, 1, 'u'})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := testStream()
		fast, ferr := s.insertEvent(data, 1)
		if len(data) == 0 || data[0] != 'I' {
			if ferr == nil {
				t.Fatal("non-insert accepted")
			}
			return
		}
		msg, serr := Decode(data, 1)
		if serr != nil || ferr != nil {
			return
		}
		m, ok := msg.(*pglogrepl.InsertMessage)
		if !ok || s.rels[m.RelationID] == nil {
			return
		}
		s.seq = 0
		slow := s.event(s.rels[m.RelationID], m.Tuple)
		if fast.IdempotencyKey != slow.IdempotencyKey || string(fast.Payload) != string(slow.Payload) || fast.ID != slow.ID ||
			fast.Topic != slow.Topic || fast.PartitionKey != slow.PartitionKey || string(fast.Headers) != string(slow.Headers) {
			t.Fatalf("fast %+v\nslow %+v", fast, slow)
		}
	})
}

func BenchmarkInsertEvent(b *testing.B) {
	data := buildInsert(7,
		[]byte("0b6f9c1e-0000-4000-8000-000000000001"), []byte("w3-t17-r5-0000000000"), []byte(`{"data": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`),
		[]byte("2026-11-29 22:50:51.123456+00"), nil, []byte("0"), nil, nil, nil, []byte("order.created"), nil, nil)
	s := testStream()
	tr := checkpoint.New(0, nil)
	x, _ := tr.OpenAt(time.Time{})
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			ev, err := s.insertEvent(data, 1)
			if err != nil {
				b.Fatal(err)
			}
			tr.Done(tr.Add(x, ev.Size()))
		}
	})
	b.Run("pglogrepl", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			msg, _ := Decode(data, 1)
			m := msg.(*pglogrepl.InsertMessage)
			ev := s.event(s.rels[m.RelationID], m.Tuple)
			tr.Done(tr.Add(x, ev.Size()))
		}
	})
}

// event is the reference decoding of an insert through pglogrepl, which
// the fast path (insertEvent) must match.
func (s *Stream) event(r *relation, tup *pglogrepl.TupleData) *outbox.Event {
	cols := tup.Columns
	get := func(i int) ([]byte, bool) {
		p := r.pos[i]
		if p < 0 || p >= len(cols) || cols[p].DataType != pglogrepl.TupleDataTypeText {
			return nil, false
		}
		return cols[p].Data, true
	}
	str := func(i int) string {
		b, _ := get(i)
		return string(b)
	}
	ev := &outbox.Event{
		ID:             str(colID),
		IdempotencyKey: str(colKey),
		CreatedAt:      str(colCreatedAt),
		Topic:          str(colTopic),
		EventType:      str(colEventType),
		XID:            s.begin.Xid,
		CommitLSN:      s.begin.FinalLSN,
		CommitTime:     s.begin.CommitTime,
		Seq:            s.seq,
	}
	// pglogrepl copies column data out of the receive buffer, so the event
	// may keep these slices.
	ev.Payload, _ = get(colPayload)
	ev.Headers, _ = get(colHeaders)
	if pk, ok := get(colPartitionKey); ok {
		ev.PartitionKey, ev.HasPartition = string(pk), true
	}
	s.seq++
	return ev
}

// TestRelationDroppedOptionalColumnLoggedOnce: a Relation message after
// DDL that drops topic or partition_key is logged once, naming the column
// and the LSN; the same relation sent again (every reconnect, every later
// DDL) logs nothing more, and events keep flowing.
func TestRelationDroppedOptionalColumnLoggedOnce(t *testing.T) {
	var logs strings.Builder
	s := &Stream{
		cfg:   Config{Slot: "s", Publication: "p", Logger: slog.New(slog.NewJSONHandler(&logs, nil))},
		table: TableName{Schema: "public", Name: "outbox"},
		rels:  map[uint32]*relation{}, warned: map[pglogrepl.MessageType]bool{},
	}
	rel := func(names ...string) []byte {
		var cols []relCol
		for _, n := range names {
			cols = append(cols, relCol{name: n, oid: 25})
		}
		return msgRelation(16394, "public", "outbox", cols)
	}
	required := []string{"id", "idempotency_key", "payload", "created_at"}
	steps := []struct {
		lsn  pglogrepl.LSN
		cols []string
	}{
		{0x100, append(slices.Clone(required), "topic", "partition_key", "event_type")}, // session start: nothing to compare with
		{0x200, append(slices.Clone(required), "partition_key", "event_type")},          // topic dropped
		{0x300, append(slices.Clone(required), "partition_key", "event_type")},          // sent again
		{0x400, append(slices.Clone(required), "event_type", "trace_id")},               // partition_key dropped, a column added
		{0x500, append(slices.Clone(required), "event_type", "trace_id")},
	}
	for _, st := range steps {
		if err := s.handle(pglogrepl.XLogData{WALStart: st.lsn, WALData: rel(st.cols...)}); err != nil {
			t.Fatalf("relation %v at %s: %v", st.cols, st.lsn, err)
		}
	}
	var got []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		got = append(got, m)
	}
	want := []struct{ column, lsn, says string }{
		{"topic", "0/200", "kafka.topic"},
		{"partition_key", "0/400", "idempotency_key"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d log lines, want %d (one per dropped column):\n%s", len(got), len(want), logs.String())
	}
	for i, w := range want {
		g := got[i]
		if g["level"] != "WARN" || g["column"] != w.column || g["lsn"] != w.lsn || g["table"] != "public.outbox" ||
			!strings.Contains(g["msg"].(string), w.says) {
			t.Errorf("log %d = %v, want a WARN for column %s at %s saying %q", i, g, w.column, w.lsn, w.says)
		}
	}
	// Events keep flowing under the new relation.
	ev, err := s.insertEvent(buildInsert(16394, []byte("id"), []byte("k"), []byte("{}"), []byte("2026-01-01 00:00:00+00"), []byte("e"), nil), 0x600)
	if err != nil || ev.Topic != "" || ev.HasPartition || ev.EventType != "e" {
		t.Fatalf("insert after the drops = %+v, %v", ev, err)
	}
}
