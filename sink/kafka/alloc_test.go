package kafka

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/outbox"
)

// The allocation budgets of the sink's per-event work, as measured: a
// test fails when a change makes it allocate more (issue 33). A change
// that allocates less lowers the budget in the same commit.
const (
	// maxRecordAllocs: building walpost's record of an event without row
	// headers (Sink.build): none, the record and its headers live in the
	// pooled produced, the key and header values are views of the
	// event's strings.
	maxRecordAllocs = 0
	// maxRecordAllocsRowHeaders: the same with a headers column of two
	// entries: parseHeaders' json.Unmarshal into a map[string]any (the
	// map, its keys and boxed values, the decoder's state) and the sorted
	// key slice.
	maxRecordAllocsRowHeaders = 15
	// maxRecordAllocsDebezium: the Debezium record, string formats, one
	// header column, the topic template's cached topic: none.
	maxRecordAllocsDebezium = 0
	// maxRecordAllocsDebeziumJSON: the same in the json formats: the
	// key's and the value's JSON strings (encode).
	maxRecordAllocsDebeziumJSON = 2
	// maxCheckSizeAllocs: the size pre-check of a record whose topic's
	// limit was read (Sink.checkSize): none.
	maxCheckSizeAllocs = 0
	// maxPartitionAllocs: the partitioner with a partition key
	// (topicPartitioner.Partition): none, the record carrying the key to
	// the hash is the topic partitioner's own.
	maxPartitionAllocs = 0
)

// allocEvent is an event of a realistic outbox row, as the stream
// decodes it: a payload of about 200 bytes, a topic, a partition key, an
// event type; rowHeaders adds a headers object of two entries.
func allocEvent(rowHeaders bool) *outbox.Event {
	ev := &outbox.Event{
		ID:               "0b6f9c1e-0000-4000-8000-000000000001",
		IdempotencyKey:   "order-7-created-0000000001",
		Payload:          []byte(`{"order_id": "0b6f9c1e-0000-4000-8000-000000000001", "customer": {"id": 7, "tier": "gold"}, "lines": [{"sku": "A-100", "qty": 2}], "total": "129.90", "note": "` + strings.Repeat("x", 40) + `"}`),
		CreatedAt:        "2026-11-29 22:50:51.123456+00",
		CreatedAtRFC3339: "2026-11-29T22:50:51.123456Z",
		Topic:            "orders",
		PartitionKey:     "customer-7",
		HasPartition:     true,
		EventType:        "order.created",
		CommitLSN:        pglogrepl.LSN(0x16_B3748000),
		CommitLSNText:    "16/B3748000",
		CommitTime:       time.Date(2026, 11, 29, 22, 50, 51, 200000000, time.UTC),
		XID:              42,
	}
	if rowHeaders {
		ev.Headers = []byte(`{"tenant": "acme", "source": "checkout"}`)
	}
	return ev
}

// allocDebeziumEvent is the event of a row of Debezium's outbox table
// with its type column placed as a header.
func allocDebeziumEvent() *outbox.Event {
	ev := allocEvent(false)
	ev.IdempotencyKey, ev.PartitionKey, ev.Topic, ev.EventType = ev.ID, "7", "Order", ""
	ev.CreatedAt, ev.CreatedAtRFC3339 = "", ""
	ev.Placed = &outbox.Placed{HeaderValues: [][]byte{[]byte("OrderCreated")}}
	return ev
}

func debeziumLayout(format string) *Layout {
	return NewLayout(Layout{Debezium: true, KeyFormat: format, ValueFormat: format, HeaderNames: []string{"eventType"}},
		"outbox.event."+RoutedByValue)
}

// allocSink is a sink as New makes it for layout l (nil: walpost's
// record), without a client: the column types of Debezium's table
// (aggregateid varchar, payload jsonb) set as the forwarder sets them.
func allocSink(tb testing.TB, l *Layout) *Sink {
	k := &Sink{cfg: Config{DefaultTopic: "events", Layout: l}, lay: l, limitRefresh: limitRefresh, limitRecheck: limitRecheck, limitRetry: limitRetry}
	if l != nil {
		key, err := ConnectType("varchar", true)
		if err != nil {
			tb.Fatal(err)
		}
		value, err := ConnectType("jsonb", false)
		if err != nil {
			tb.Fatal(err)
		}
		k.SetColumnTypes(key, value)
	}
	return k
}

// recordCases are the record builds the gates measure.
func recordCases(tb testing.TB) []struct {
	name   string
	sink   *Sink
	ev     *outbox.Event
	budget int
} {
	return []struct {
		name   string
		sink   *Sink
		ev     *outbox.Event
		budget int
	}{
		{"walpost", allocSink(tb, nil), allocEvent(false), maxRecordAllocs},
		{"walpost_row_headers", allocSink(tb, nil), allocEvent(true), maxRecordAllocsRowHeaders},
		{"debezium", allocSink(tb, debeziumLayout(FormatString)), allocDebeziumEvent(), maxRecordAllocsDebezium},
		{"debezium_json", allocSink(tb, debeziumLayout(FormatJSON)), allocDebeziumEvent(), maxRecordAllocsDebeziumJSON},
	}
}

// buildPooled is Produce's build: into a pooled produced, released
// after (as its promise does).
func (k *Sink) buildPooled(tb testing.TB, ev *outbox.Event) {
	p := produceds.Get().(*produced)
	if err := k.build(&p.rec, p.hdrs[:0], ev); err != nil {
		tb.Fatal(err)
	}
	p.release()
}

// TestRecordAllocs gates the allocations of building an event's record,
// in walpost's layout and Debezium's.
func TestRecordAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops sync.Pool items at random; scripts/test.sh runs the gates without it")
	}
	for _, c := range recordCases(t) {
		t.Run(c.name, func(t *testing.T) {
			c.sink.buildPooled(t, c.ev) // the pool holds a produced, the template its topic
			got := testing.AllocsPerRun(1000, func() { c.sink.buildPooled(t, c.ev) })
			t.Logf("sink/kafka record (%s): %.0f allocations per event (budget %d)", c.name, got, c.budget)
			if got > float64(c.budget) {
				t.Fatalf("sink/kafka record (%s): building the record allocates %.0f objects per event, budget %d", c.name, got, c.budget)
			}
		})
	}
}

// TestCheckSizeAllocs gates the size pre-check of a record whose topic's
// limit is known.
func TestCheckSizeAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector adds allocations; scripts/test.sh runs the gates without it")
	}
	k := allocSink(t, nil)
	now := time.Now()
	k.limits.Store("orders", topicLimit{bytes: 1 << 20, readAt: now})
	k.built.Store("orders", 1<<20)
	r, err := BuildRecord(allocEvent(false), "events")
	if err != nil {
		t.Fatal(err)
	}
	got := testing.AllocsPerRun(1000, func() {
		if err := k.checkSize(r, now); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("sink/kafka size check: %.0f allocations per event (budget %d)", got, maxCheckSizeAllocs)
	if got > maxCheckSizeAllocs {
		t.Fatalf("sink/kafka size check: checkSize allocates %.0f objects per event, budget %d (maxCheckSizeAllocs)", got, maxCheckSizeAllocs)
	}
}

// TestPartitionAllocs gates the partitioner of a record with a partition
// key, for each kafka.partitioner.
func TestPartitionAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector adds allocations; scripts/test.sh runs the gates without it")
	}
	for _, name := range []string{PartitionerMurmur2, PartitionerConsistentRandom, PartitionerFNV1a} {
		t.Run(name, func(t *testing.T) {
			keyed, err := KeyPartitioner(name)
			if err != nil {
				t.Fatal(err)
			}
			tp := partitioner{keyed}.ForTopic("orders")
			ev := allocEvent(false)
			p := &produced{pk: ev.PartitionKey, hasPK: true}
			r := &kgo.Record{Topic: "orders", Key: []byte(ev.IdempotencyKey), Context: p}
			got := testing.AllocsPerRun(1000, func() { tp.Partition(r, 12) })
			t.Logf("sink/kafka partitioner (%s): %.0f allocations per event (budget %d)", name, got, maxPartitionAllocs)
			if got > maxPartitionAllocs {
				t.Fatalf("sink/kafka partitioner (%s): Partition allocates %.0f objects per event, budget %d (maxPartitionAllocs)", name, got, maxPartitionAllocs)
			}
		})
	}
}

// BenchmarkRecord is building an event's record as Produce does.
func BenchmarkRecord(b *testing.B) {
	for _, c := range recordCases(b) {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.sink.buildPooled(b, c.ev)
			}
		})
	}
}

// BenchmarkPartition is the partitioner of a record with a partition key.
func BenchmarkPartition(b *testing.B) {
	keyed, err := KeyPartitioner(PartitionerMurmur2)
	if err != nil {
		b.Fatal(err)
	}
	tp := partitioner{keyed}.ForTopic("orders")
	ev := allocEvent(false)
	r := &kgo.Record{Topic: "orders", Key: []byte(ev.IdempotencyKey), Context: &produced{pk: ev.PartitionKey, hasPK: true}}
	b.ReportAllocs()
	for b.Loop() {
		tp.Partition(r, 12)
	}
}
