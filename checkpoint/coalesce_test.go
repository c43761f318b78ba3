package checkpoint

import (
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

// TestTrackerEmptyTransactionsCoalesce: a million transactions without
// events (PG 14's empty Begin/Commit of every write, transactional
// logical messages) behind a head transaction whose event waits for its
// ack keep the FIFO at O(1) entries; once the event is acked the
// watermark is the last empty transaction's end, never before.
func TestTrackerEmptyTransactionsCoalesce(t *testing.T) {
	const empties = 1_000_000
	tr := New(0x100, nil)
	head, err := tr.OpenAt(time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	k := tr.Add(head, 10)
	end := pglogrepl.LSN(0x200)
	if err := tr.Seal(head, end); err != nil {
		t.Fatal(err)
	}
	maxQueued, maxCap := 0, 0
	for i := 0; i < empties; i++ {
		x, err := tr.OpenAt(time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		end += 0x30
		if err := tr.Seal(x, end); err != nil {
			t.Fatal(err)
		}
		// INV-1: the head's event is not acked.
		if c := tr.Confirmed(); c != 0x100 {
			t.Fatalf("after %d empty transactions Confirmed() = %s, want 0/100 (head event unacked)", i+1, c)
		}
		tr.mu.Lock()
		maxQueued = max(maxQueued, len(tr.fifo)-tr.head)
		maxCap = max(maxCap, cap(tr.fifo))
		tr.mu.Unlock()
	}
	if maxQueued > 2 || maxCap > 8 {
		t.Fatalf("%d empty transactions behind an unacked one: up to %d transactions queued (FIFO capacity %d), want at most 2", empties, maxQueued, maxCap)
	}
	// An empty transaction behind a sealed one with events merges into it
	// too: it must not confirm the earlier one's end early.
	x, _ := tr.OpenAt(time.Time{})
	k2 := tr.Add(x, 10)
	end += 0x30
	if err := tr.Seal(x, end); err != nil {
		t.Fatal(err)
	}
	tr.Done(k)
	if c, want := tr.Confirmed(), end-0x30; c != want {
		t.Fatalf("head acked: Confirmed() = %s, want %s (the last empty transaction's end)", c, want)
	}
	y, _ := tr.OpenAt(time.Time{})
	end += 0x30
	if err := tr.Seal(y, end); err != nil {
		t.Fatal(err)
	}
	if c, want := tr.Confirmed(), end-0x60; c != want {
		t.Fatalf("empty transaction behind an unacked one: Confirmed() = %s, want %s", c, want)
	}
	tr.Done(k2)
	if c := tr.Confirmed(); c != end {
		t.Fatalf("all acked: Confirmed() = %s, want %s", c, end)
	}
	if tr.Pending() {
		t.Fatal("Pending() with everything confirmed")
	}
}
