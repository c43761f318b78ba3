package checkpoint_test

import (
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/checkpoint"
)

// BenchmarkTrackerEvent is the reader's and the acker's work per event:
// one transaction of one event (Open, Add, Seal, Done, Confirmed).
func BenchmarkTrackerEvent(b *testing.B) {
	tr := checkpoint.New(1, nil)
	end := pglogrepl.LSN(1)
	b.ReportAllocs()
	for b.Loop() {
		x, err := tr.OpenAt(time.Time{})
		if err != nil {
			b.Fatal(err)
		}
		k := tr.Add(x, 100)
		end += 0x40
		if err := tr.Seal(x, end); err != nil {
			b.Fatal(err)
		}
		tr.Done(k)
		if tr.Confirmed() != end {
			b.Fatal("not confirmed")
		}
	}
}

// BenchmarkTrackerEmptyTxn is one transaction without events (PG 14's
// empty Begin/Commit) behind a head transaction whose event waits for its
// ack, as during a Kafka outage.
func BenchmarkTrackerEmptyTxn(b *testing.B) {
	tr := checkpoint.New(1, nil)
	head, _ := tr.OpenAt(time.Time{})
	k := tr.Add(head, 100)
	end := pglogrepl.LSN(0x40)
	if err := tr.Seal(head, end); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		x, err := tr.OpenAt(time.Time{})
		if err != nil {
			b.Fatal(err)
		}
		end += 0x40
		if err := tr.Seal(x, end); err != nil {
			b.Fatal(err)
		}
		if tr.Confirmed() != 1 {
			b.Fatal("confirmed past the unacked event")
		}
	}
	b.StopTimer()
	tr.Done(k)
	if tr.Confirmed() != end {
		b.Fatalf("Confirmed() = %s after the ack, want %s", tr.Confirmed(), end)
	}
}
