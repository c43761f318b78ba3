package replication

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/replication/replicationtest"
)

// The allocation budgets of the reader's per-event path, as measured: a
// test fails when a change makes the path allocate more (issue 33). A
// change that allocates less lowers the budget in the same commit.
const (
	// maxInsertAllocs: one Insert of an open transaction, from the
	// CopyData payload to the Emit of its event: the Event and the one
	// buffer holding its column bytes (insertEvent).
	maxInsertAllocs = 2
	// maxInsertAllocsDebezium: the same in the Debezium layout with one
	// header column: also the Placed columns, their HeaderValues and the
	// spans of the extra columns (extraSpans).
	maxInsertAllocsDebezium = 5
	// maxTxnAllocs: a transaction of one event, Begin, Insert, Commit:
	// the Insert's two, pglogrepl's BeginMessage and CommitMessage, and
	// the commit LSN's text (lsnText).
	maxTxnAllocs = 5
)

// outboxColumns are the columns of walpost's outbox table
// (migrations/00001_outbox.sql), in its order.
var outboxColumns = []replicationtest.Column{
	{Name: "id", OID: 2950, Key: true}, {Name: "idempotency_key", OID: 25}, {Name: "payload", OID: 3802},
	{Name: "created_at", OID: 1184}, {Name: "sent_at", OID: 1184}, {Name: "attempts", OID: 23},
	{Name: "last_error", OID: 25}, {Name: "topic", OID: 25}, {Name: "partition_key", OID: 25},
	{Name: "event_type", OID: 25}, {Name: "headers", OID: 3802},
}

// realisticInsert is an Insert of a realistic outbox row: a uuid, a key, a
// jsonb payload of about 200 bytes, a topic, a partition key, an event
// type and a headers object.
func realisticInsert(rel uint32) []byte {
	payload := `{"order_id": "0b6f9c1e-0000-4000-8000-000000000001", "customer": {"id": 7, "tier": "gold"}, "lines": [{"sku": "A-100", "qty": 2}], "total": "129.90", "note": "` + strings.Repeat("x", 40) + `"}`
	return replicationtest.Insert(rel, []replicationtest.Value{
		replicationtest.Text("0b6f9c1e-0000-4000-8000-000000000001"), replicationtest.Text("order-7-created-0000000001"),
		replicationtest.Text(payload), replicationtest.Text("2026-11-29 22:50:51.123456+00"), replicationtest.Null,
		replicationtest.Text("0"), replicationtest.Null, replicationtest.Text("orders"), replicationtest.Text("customer-7"),
		replicationtest.Text("order.created"), replicationtest.Text(`{"tenant": "acme", "source": "checkout"}`),
	})
}

// debeziumColumns are the columns of Debezium's outbox table, with its
// type column placed as a header (mapping.header_columns).
var (
	debeziumColumns = []replicationtest.Column{
		{Name: "id", OID: 2950, Key: true}, {Name: "aggregatetype", OID: 25}, {Name: "aggregateid", OID: 25},
		{Name: "type", OID: 25}, {Name: "payload", OID: 3802},
	}
	debeziumMapping = Columns{Debezium: true, Headers: []string{"type"}}
)

// realisticDebeziumInsert is an Insert of a row of Debezium's outbox
// table.
func realisticDebeziumInsert(rel uint32) []byte {
	payload := `{"order_id": "0b6f9c1e-0000-4000-8000-000000000001", "customer": {"id": 7, "tier": "gold"}, "lines": [{"sku": "A-100", "qty": 2}], "total": "129.90", "note": "` + strings.Repeat("x", 40) + `"}`
	return replicationtest.Insert(rel, []replicationtest.Value{
		replicationtest.Text("0b6f9c1e-0000-4000-8000-000000000001"), replicationtest.Text("Order"),
		replicationtest.Text("7"), replicationtest.Text("OrderCreated"), replicationtest.Text(payload),
	})
}

// allocStream is a stream past its Relation message, as after the first
// event of a session, whose handler acknowledges each event at once;
// debezium selects Debezium's table and mapping.
func allocStream(tb testing.TB, debezium bool) (*Stream, *int) {
	tb.Helper()
	tr := checkpoint.New(0, nil)
	emitted := new(int)
	cols, cfg := outboxColumns, Config{Slot: "s", Publication: "p"}
	if debezium {
		cols, cfg.Columns = debeziumColumns, debeziumMapping
	}
	s := &Stream{
		cfg:     cfg,
		layout:  cfg.Columns.resolve(),
		table:   TableName{Schema: "public", Name: "outbox"},
		tracker: tr,
		budget:  unbounded{},
		pause:   unbounded{},
		h: HandlerFuncs{EmitFunc: func(ev *outbox.Event, t checkpoint.Ticket) {
			*emitted++
			tr.Done(t)
		}},
		rels: map[uint32]*relation{}, warned: map[pglogrepl.MessageType]bool{},
	}
	if err := s.handle(pglogrepl.XLogData{WALStart: 0x10, WALData: replicationtest.Relation(16394, "public", "outbox", cols)}); err != nil {
		tb.Fatal(err)
	}
	return s, emitted
}

// txnMessages are the CopyData payloads of a one-event transaction. next
// moves the transaction's LSNs forward in place, so each round is a new
// transaction without building new messages.
type txnMessages struct {
	begin, insert, commit []byte
	end                   pglogrepl.LSN
}

func newTxnMessages(debezium bool) *txnMessages {
	at := time.Date(2026, 11, 29, 22, 50, 51, 0, time.UTC)
	insert := realisticInsert(16394)
	if debezium {
		insert = realisticDebeziumInsert(16394)
	}
	return &txnMessages{
		begin:  replicationtest.XLogData(0, replicationtest.Begin(0, at, 42)),
		insert: replicationtest.XLogData(0, insert),
		commit: replicationtest.XLogData(0, replicationtest.Commit(0, 0, at)),
		end:    0x16_B3740000, // an LSN as 16/B3740000
	}
}

// next sets the LSNs of the next transaction: XLogData's WAL start is at
// byte 1, Begin's final LSN at 26 and Commit's LSNs at 27 and 35.
func (m *txnMessages) next() {
	final := m.end + 0x100
	m.end = final + 0x30
	binary.BigEndian.PutUint64(m.begin[1:], uint64(final-0x80))
	binary.BigEndian.PutUint64(m.begin[26:], uint64(final))
	binary.BigEndian.PutUint64(m.insert[1:], uint64(final-0x60))
	binary.BigEndian.PutUint64(m.commit[1:], uint64(final))
	binary.BigEndian.PutUint64(m.commit[27:], uint64(final))
	binary.BigEndian.PutUint64(m.commit[35:], uint64(m.end))
}

// copyData is what Run does with one XLogData CopyData payload, with the
// frontier and budget calls of its loop around it (Confirmed, blocked).
func (s *Stream) copyData(tb testing.TB, data []byte) {
	if s.tracker.Confirmed() < s.sent || s.blocked() {
		tb.Fatal("watermark moved back, or the stream is blocked")
	}
	xld, err := pglogrepl.ParseXLogData(data[1:])
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.handle(xld); err != nil {
		tb.Fatal(err)
	}
}

func (m *txnMessages) run(tb testing.TB, s *Stream) {
	m.next()
	s.copyData(tb, m.begin)
	s.copyData(tb, m.insert)
	s.copyData(tb, m.commit)
}

// TestInsertAllocs gates the allocations of one Insert in an open
// transaction (maxInsertAllocs, maxInsertAllocsDebezium).
func TestInsertAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector adds allocations; scripts/test.sh runs the gates without it")
	}
	for _, c := range []struct {
		name     string
		debezium bool
		budget   int
	}{
		{"walpost", false, maxInsertAllocs},
		{"debezium", true, maxInsertAllocsDebezium},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, emitted := allocStream(t, c.debezium)
			m := newTxnMessages(c.debezium)
			m.next()
			s.copyData(t, m.begin)
			got := testing.AllocsPerRun(1000, func() { s.copyData(t, m.insert) })
			s.copyData(t, m.commit)
			t.Logf("replication (%s layout): %.0f allocations per Insert (budget %d)", c.name, got, c.budget)
			if *emitted != 1001 || s.tracker.Confirmed() != m.end {
				t.Fatalf("emitted %d events, confirmed %s: want 1001 events, confirmed %s", *emitted, s.tracker.Confirmed(), m.end)
			}
			if got > float64(c.budget) {
				t.Fatalf("replication (%s layout): decoding an Insert into its event allocates %.0f objects, budget %d", c.name, got, c.budget)
			}
		})
	}
}

// TestTxnAllocs gates the allocations of a transaction of one event,
// Begin, Insert and Commit (maxTxnAllocs).
func TestTxnAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector adds allocations; scripts/test.sh runs the gates without it")
	}
	s, emitted := allocStream(t, false)
	m := newTxnMessages(false)
	m.run(t, s) // the tracker's pool holds a transaction from here on
	got := testing.AllocsPerRun(1000, func() { m.run(t, s) })
	t.Logf("replication: %.0f allocations per one-event transaction (budget %d)", got, maxTxnAllocs)
	if *emitted != 1002 || s.tracker.Confirmed() != m.end {
		t.Fatalf("emitted %d events, confirmed %s: want 1002 events, confirmed %s", *emitted, s.tracker.Confirmed(), m.end)
	}
	if got > maxTxnAllocs {
		t.Fatalf("replication: decoding a one-event transaction (Begin, Insert, Commit) allocates %.0f objects, budget %d (maxTxnAllocs)", got, maxTxnAllocs)
	}
}

// BenchmarkInsert is one Insert of an open transaction through handle.
func BenchmarkInsert(b *testing.B) {
	for _, debezium := range []bool{false, true} {
		name := "walpost"
		if debezium {
			name = "debezium"
		}
		b.Run(name, func(b *testing.B) {
			s, _ := allocStream(b, debezium)
			m := newTxnMessages(debezium)
			m.next()
			s.copyData(b, m.begin)
			b.ReportAllocs()
			for b.Loop() {
				s.copyData(b, m.insert)
			}
		})
	}
}

// BenchmarkTxn is a transaction of one event through handle.
func BenchmarkTxn(b *testing.B) {
	s, _ := allocStream(b, false)
	m := newTxnMessages(false)
	b.ReportAllocs()
	for b.Loop() {
		m.run(b, s)
	}
}

// TestLSNText: lsnText writes what pglogrepl's LSN.String writes.
func TestLSNText(t *testing.T) {
	for _, lsn := range []pglogrepl.LSN{0, 1, 0xA, 0x16_B374D848, 0xFFFFFFFF, 0x1_00000000, 0xABCDEF01_23456789, ^pglogrepl.LSN(0)} {
		if got, want := lsnText(lsn), lsn.String(); got != want {
			t.Errorf("lsnText(%#x) = %q, want %q", uint64(lsn), got, want)
		}
	}
}

// TestEventSentAt: an event carries the send time of the replication
// message that held it (the server's clock, as its commit time), which
// the exactly-once transactor compares with the commit time to tell a
// stream that follows the writers from one draining a backlog.
func TestEventSentAt(t *testing.T) {
	s, _ := allocStream(t, false)
	var got *outbox.Event
	s.h = HandlerFuncs{EmitFunc: func(ev *outbox.Event, tk checkpoint.Ticket) { got = ev; s.tracker.(*checkpoint.Tracker).Done(tk) }}
	commit := time.Date(2026, 11, 29, 22, 50, 51, 0, time.UTC)
	if err := s.handle(pglogrepl.XLogData{WALStart: 0x100, WALData: replicationtest.Begin(0x200, commit, 42)}); err != nil {
		t.Fatal(err)
	}
	sent := commit.Add(3 * time.Millisecond)
	if err := s.handle(pglogrepl.XLogData{WALStart: 0x120, ServerTime: sent, WALData: realisticInsert(16394)}); err != nil {
		t.Fatal(err)
	}
	if got == nil || !got.SentAt.Equal(sent) || got.SentAt.Sub(got.CommitTime) != 3*time.Millisecond {
		t.Fatalf("event %+v: want SentAt %v, 3 ms after its commit", got, sent)
	}
}
