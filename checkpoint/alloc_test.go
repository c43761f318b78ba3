package checkpoint_test

import (
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/checkpoint"
)

// The allocation budgets of the tracker's per-event calls, as measured:
// a test fails when a change makes them allocate (issue 33).
const (
	// maxEventAllocs: one event of an open transaction, as the reader
	// and the acker call the tracker for it (Add, Done, and the reader
	// loop's Confirmed and Full): none, the done bitset of a pooled
	// transaction is reused.
	maxEventAllocs = 0
	// maxTxnAllocs: a transaction of one event (OpenAt, Add, Seal, Done,
	// Confirmed, Watermark): none, transactions are pooled.
	maxTxnAllocs = 0
)

// TestEventAllocs gates the tracker's calls per event of a transaction
// of many (maxEventAllocs).
func TestEventAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector adds allocations; scripts/test.sh runs the gates without it")
	}
	const events = 1000
	budget := checkpoint.NewBudget(checkpoint.Limits{MaxEvents: 10000, MaxBytes: 64 << 20})
	tr := checkpoint.New(1, budget)
	end := pglogrepl.LSN(0x16_B3740000)
	txn := func(each func(x *checkpoint.Txn)) {
		x, err := tr.OpenAt(time.Unix(1700000000, 0))
		if err != nil {
			t.Fatal(err)
		}
		each(x)
		end += 0x1000
		if err := tr.Seal(x, end); err != nil {
			t.Fatal(err)
		}
		if got := tr.Confirmed(); got != end {
			t.Fatalf("Confirmed() = %s after every event was done, want %s", got, end)
		}
	}
	event := func(x *checkpoint.Txn) {
		tr.Done(tr.Add(x, 600))
		if tr.Confirmed() > end || budget.Full() {
			t.Fatal("watermark past the open transaction, or the tracker full")
		}
	}
	// A first transaction of as many events grows the pooled
	// transaction's done bitset; the second reuses it.
	txn(func(x *checkpoint.Txn) {
		for range events {
			event(x)
		}
	})
	var got float64
	txn(func(x *checkpoint.Txn) {
		got = testing.AllocsPerRun(events-1, func() { event(x) }) // AllocsPerRun runs it once more to warm up
	})
	t.Logf("checkpoint: %.0f allocations per event (budget %d)", got, maxEventAllocs)
	if got > maxEventAllocs {
		t.Fatalf("checkpoint: the tracker's calls for one event (Add, Done, Confirmed, Full) allocate %.0f objects, budget %d (maxEventAllocs)", got, maxEventAllocs)
	}
}

// TestTxnAllocs gates the tracker's calls for a transaction of one event
// (maxTxnAllocs).
func TestTxnAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector adds allocations; scripts/test.sh runs the gates without it")
	}
	tr := checkpoint.New(1, checkpoint.NewBudget(checkpoint.Limits{MaxEvents: 10000, MaxBytes: 64 << 20}))
	end := pglogrepl.LSN(0x16_B3740000)
	commit := time.Unix(1700000000, 0)
	got := testing.AllocsPerRun(1000, func() {
		x, err := tr.OpenAt(commit)
		if err != nil {
			t.Fatal(err)
		}
		k := tr.Add(x, 600)
		end += 0x100
		if err := tr.Seal(x, end); err != nil {
			t.Fatal(err)
		}
		tr.Done(k)
		if tr.Confirmed() != end || tr.Watermark().LSN != end {
			t.Fatal("not confirmed")
		}
	})
	t.Logf("checkpoint: %.0f allocations per one-event transaction (budget %d)", got, maxTxnAllocs)
	if got > maxTxnAllocs {
		t.Fatalf("checkpoint: the tracker's calls for a one-event transaction (OpenAt, Add, Seal, Done, Confirmed, Watermark) allocate %.0f objects, budget %d (maxTxnAllocs)", got, maxTxnAllocs)
	}
}

// BenchmarkEventInTxn is the tracker's work per event of a transaction of
// many: Add, Done, Confirmed, Full.
func BenchmarkEventInTxn(b *testing.B) {
	budget := checkpoint.NewBudget(checkpoint.Limits{MaxEvents: 10000, MaxBytes: 64 << 20})
	tr := checkpoint.New(1, budget)
	x, err := tr.OpenAt(time.Time{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		tr.Done(tr.Add(x, 600))
		if tr.Confirmed() != 1 || budget.Full() {
			b.Fatal("confirmed past the open transaction, or full")
		}
	}
}
