package inbox

import (
	"fmt"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// walpostBatch is a polled batch as walpost writes it: 1,000 first sends
// over 6 partitions, transactions of 1 to 5 records, walpost's headers.
func walpostBatch() []*kgo.Record {
	const size = 1000
	recs := make([]*kgo.Record, size)
	lsn := uint64(0x16B3748)
	for i := 0; i < size; {
		lsn += 0x1000
		for j := 0; j < 1+i%5 && i < size; j++ {
			key := fmt.Sprintf("%08d-0000-7000-8000-000000000000", i)
			recs[i] = &kgo.Record{Topic: topic, Partition: int32(i % 6), Offset: int64(i), Key: []byte(key), Headers: []kgo.RecordHeader{
				{Key: "idempotency_key", Value: []byte(key)}, {Key: "outbox_id", Value: []byte(key)},
				{Key: "commit_lsn", Value: []byte(fmt.Sprintf("%X/%X", lsn>>32, uint32(lsn)))},
				{Key: "created_at", Value: []byte("2026-12-02T08:00:00.000000Z")}, {Key: "event_type", Value: []byte("account.debited")},
			}}
			i++
		}
	}
	// A fetch holds each partition's records together, in offset order.
	slices.SortStableFunc(recs, func(a, b *kgo.Record) int { return int(a.Partition - b.Partition) })
	return recs
}

// BenchmarkPlan is the inbox's work per polled batch before the database:
// reading the headers and deciding every record on cached watermarks.
func BenchmarkPlan(b *testing.B) {
	recs := walpostBatch()
	in, _ := New(Config{Group: "bench"})
	b.ReportAllocs()
	for b.Loop() {
		evs, err := parseAll(recs)
		if err != nil {
			b.Fatal(err)
		}
		marks := map[topicPartition]*mark{}
		for p := range int32(6) {
			marks[topicPartition{topic, p}] = &mark{nextOffset: -1}
		}
		in.plan(evs, marks)
	}
}

// TestPlanAllocations holds the inbox's work per batch to a few
// allocations whatever the batch's size: a record decided by the
// watermark costs none (its key stays a view of the record until the
// watermark keeps it).
func TestPlanAllocations(t *testing.T) {
	recs := walpostBatch()
	in, _ := New(Config{Group: "allocs"})
	var evs []event
	allocs := testing.AllocsPerRun(20, func() {
		var err error
		if evs, err = parseAllInto(evs, recs); err != nil {
			t.Fatal(err)
		}
		marks := map[topicPartition]*mark{}
		for p := range int32(6) {
			marks[topicPartition{topic, p}] = &mark{nextOffset: -1}
		}
		in.plan(evs, marks)
	})
	// The marks, the plan and its verdicts, and the keys the six
	// watermarks keep (at most five each): about 40.
	if allocs > 60 {
		t.Errorf("%.0f allocations to decide a batch of %d records, want at most 60", allocs, len(recs))
	}
}
