package checkpoint_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/internal/leak"
)

// txnSpec describes one transaction of a scenario: how many events it gets
// and the end LSN it is sealed with (0: left open).
type txnSpec struct {
	events int
	end    pglogrepl.LSN
}

// build opens, fills and seals the transactions of specs in order and
// returns the tickets per transaction.
func build(t *testing.T, tr *checkpoint.Tracker, specs []txnSpec) [][]checkpoint.Ticket {
	t.Helper()
	tickets := make([][]checkpoint.Ticket, len(specs))
	for i, s := range specs {
		x, err := tr.OpenAt(time.Time{})
		if err != nil {
			t.Fatalf("txn %d: Open: %v", i, err)
		}
		for range s.events {
			tickets[i] = append(tickets[i], tr.Add(x, 10))
		}
		if s.end == 0 {
			continue
		}
		if err := tr.Seal(x, s.end); err != nil {
			t.Fatalf("txn %d: Seal(%s): %v", i, s.end, err)
		}
	}
	return tickets
}

// ev names one event: transaction index and event index within it.
type ev struct{ txn, i int }

func TestTrackerConfirmed(t *testing.T) {
	const start = pglogrepl.LSN(0x1000)
	tests := []struct {
		name string
		txns []txnSpec
		done []ev // Done calls, in this order
		want pglogrepl.LSN
	}{
		{
			name: "no transactions: the start",
			want: start,
		},
		{
			name: "sealed, nothing done",
			txns: []txnSpec{{events: 2, end: 0x1100}},
			want: start,
		},
		{
			name: "sealed, partly done",
			txns: []txnSpec{{events: 2, end: 0x1100}},
			done: []ev{{0, 1}},
			want: start,
		},
		{
			name: "sealed, all done",
			txns: []txnSpec{{events: 2, end: 0x1100}},
			done: []ev{{0, 1}, {0, 0}},
			want: 0x1100,
		},
		{
			name: "empty transaction confirms at once",
			txns: []txnSpec{{events: 0, end: 0x1100}},
			want: 0x1100,
		},
		{
			name: "open transaction with every event done is not confirmed",
			txns: []txnSpec{{events: 1, end: 0x1100}, {events: 1}},
			done: []ev{{0, 0}, {1, 0}},
			want: 0x1100,
		},
		{
			name: "later transaction acked first: watermark waits (low watermark, not highest ack)",
			txns: []txnSpec{{events: 1, end: 0x1100}, {events: 1, end: 0x1200}, {events: 1, end: 0x1300}},
			done: []ev{{2, 0}, {1, 0}},
			want: start,
		},
		{
			name: "gap filled: jumps to the last fully handled",
			txns: []txnSpec{{events: 1, end: 0x1100}, {events: 1, end: 0x1200}, {events: 1, end: 0x1300}},
			done: []ev{{2, 0}, {1, 0}, {0, 0}},
			want: 0x1300,
		},
		{
			name: "stops at the first transaction with an unhandled event",
			txns: []txnSpec{{events: 1, end: 0x1100}, {events: 3, end: 0x1200}, {events: 1, end: 0x1300}},
			done: []ev{{0, 0}, {1, 0}, {1, 2}, {2, 0}},
			want: 0x1100,
		},
		{
			name: "several events at one LSN (Debezium #1554): all must be done",
			txns: []txnSpec{{events: 5, end: 0x1100}},
			done: []ev{{0, 0}, {0, 1}, {0, 2}, {0, 4}},
			want: start,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := checkpoint.New(start, nil)
			tickets := build(t, tr, tc.txns)
			prev := tr.Confirmed()
			for _, d := range tc.done {
				tr.Done(tickets[d.txn][d.i])
				c := tr.Confirmed()
				if c < prev {
					t.Fatalf("Confirmed went back from %s to %s", prev, c)
				}
				prev = c
			}
			if got := tr.Confirmed(); got != tc.want {
				t.Errorf("Confirmed() = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestTrackerIdle(t *testing.T) {
	const start = pglogrepl.LSN(0x1000)
	tests := []struct {
		name     string
		txns     []txnSpec
		done     []ev
		walEnd   pglogrepl.LSN
		wantMove bool
		want     pglogrepl.LSN
	}{
		{
			name:   "nothing received: confirms the WAL end",
			walEnd: 0x2000, wantMove: true, want: 0x2000,
		},
		{
			name:   "WAL end at the watermark is ignored",
			walEnd: start, want: start,
		},
		{
			name:   "WAL end below the watermark is ignored",
			walEnd: 0x0800, want: start,
		},
		{
			name:   "event in flight (Conduit #313)",
			txns:   []txnSpec{{events: 1, end: 0x1100}},
			walEnd: 0x2000, want: start,
		},
		{
			name:   "one of two events in flight",
			txns:   []txnSpec{{events: 2, end: 0x1100}},
			done:   []ev{{0, 0}},
			walEnd: 0x2000, want: start,
		},
		{
			name:   "open transaction with no event",
			txns:   []txnSpec{{events: 0}},
			walEnd: 0x2000, want: start,
		},
		{
			name:   "open transaction, its events done",
			txns:   []txnSpec{{events: 2}},
			done:   []ev{{0, 0}, {0, 1}},
			walEnd: 0x2000, want: start,
		},
		{
			name:   "sealed and done, then idle past it",
			txns:   []txnSpec{{events: 2, end: 0x1100}},
			done:   []ev{{0, 1}, {0, 0}},
			walEnd: 0x2000, wantMove: true, want: 0x2000,
		},
		{
			name:   "sealed and done, WAL end equal to its end",
			txns:   []txnSpec{{events: 1, end: 0x1100}},
			done:   []ev{{0, 0}},
			walEnd: 0x1100, want: 0x1100,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := checkpoint.New(start, nil)
			tickets := build(t, tr, tc.txns)
			for _, d := range tc.done {
				tr.Done(tickets[d.txn][d.i])
			}
			if moved := tr.Idle(tc.walEnd); moved != tc.wantMove {
				t.Errorf("Idle(%s) = %v, want %v", tc.walEnd, moved, tc.wantMove)
			}
			if got := tr.Confirmed(); got != tc.want {
				t.Errorf("Confirmed() = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestTrackerIdleThenSealBelowIsRegression(t *testing.T) {
	tr := checkpoint.New(0x1000, nil)
	if !tr.Idle(0x2000) {
		t.Fatal("Idle(0/2000) did not move an empty tracker")
	}
	x, err := tr.OpenAt(time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Seal(x, 0x1800); !errors.Is(err, checkpoint.ErrRegression) {
		t.Errorf("Seal below the idle WAL end: err = %v, want ErrRegression", err)
	}
	if got := tr.Confirmed(); got != 0x2000 {
		t.Errorf("Confirmed() = %s, want 0/2000", got)
	}
}

func TestTrackerErrors(t *testing.T) {
	const start = pglogrepl.LSN(0x1000)
	tests := []struct {
		name string
		run  func(tr *checkpoint.Tracker) error
	}{
		{
			name: "seal at the start LSN",
			run: func(tr *checkpoint.Tracker) error {
				x, _ := tr.OpenAt(time.Time{})
				return tr.Seal(x, start)
			},
		},
		{
			name: "seal below the start LSN",
			run: func(tr *checkpoint.Tracker) error {
				x, _ := tr.OpenAt(time.Time{})
				return tr.Seal(x, start-1)
			},
		},
		{
			name: "seal with the previous end LSN",
			run: func(tr *checkpoint.Tracker) error {
				x, _ := tr.OpenAt(time.Time{})
				if err := tr.Seal(x, 0x1100); err != nil {
					return err
				}
				y, _ := tr.OpenAt(time.Time{})
				return tr.Seal(y, 0x1100)
			},
		},
		{
			name: "seal with a smaller end LSN",
			run: func(tr *checkpoint.Tracker) error {
				x, _ := tr.OpenAt(time.Time{})
				if err := tr.Seal(x, 0x1200); err != nil {
					return err
				}
				y, _ := tr.OpenAt(time.Time{})
				return tr.Seal(y, 0x1100)
			},
		},
		{
			name: "seal twice",
			run: func(tr *checkpoint.Tracker) error {
				x, _ := tr.OpenAt(time.Time{})
				if err := tr.Seal(x, 0x1100); err != nil {
					return err
				}
				return tr.Seal(x, 0x1200)
			},
		},
		{
			name: "seal of a transaction never opened",
			run: func(tr *checkpoint.Tracker) error {
				return tr.Seal(&checkpoint.Txn{}, 0x1100)
			},
		},
		{
			name: "seal of an older transaction while another is open",
			run: func(tr *checkpoint.Tracker) error {
				x, _ := tr.OpenAt(time.Time{})
				if err := tr.Seal(x, 0x1100); err != nil {
					return err
				}
				if _, err := tr.OpenAt(time.Time{}); err != nil {
					return err
				}
				return tr.Seal(x, 0x1200)
			},
		},
		{
			name: "open while a transaction is open",
			run: func(tr *checkpoint.Tracker) error {
				if _, err := tr.OpenAt(time.Time{}); err != nil {
					return err
				}
				_, err := tr.OpenAt(time.Time{})
				return err
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := checkpoint.New(start, nil)
			if err := tc.run(tr); !errors.Is(err, checkpoint.ErrRegression) {
				t.Errorf("err = %v, want ErrRegression", err)
			}
			if got := tr.Confirmed(); got < start {
				t.Errorf("Confirmed() = %s after a refused operation, below the start %s", got, start)
			}
		})
	}
}

func TestTrackerRefusedSealKeepsTxnOpen(t *testing.T) {
	tr := checkpoint.New(0x1000, nil)
	x, _ := tr.OpenAt(time.Time{})
	k := tr.Add(x, 1)
	if err := tr.Seal(x, 0x0900); !errors.Is(err, checkpoint.ErrRegression) {
		t.Fatalf("Seal(0/900) = %v, want ErrRegression", err)
	}
	tr.Done(k)
	if got := tr.Confirmed(); got != 0x1000 {
		t.Errorf("Confirmed() = %s, want 0/1000: a refused seal must not confirm", got)
	}
	if !tr.Pending() {
		t.Error("Pending() = false, want true: the transaction is still open")
	}
	if err := tr.Seal(x, 0x1100); err != nil {
		t.Fatalf("Seal(0/1100) after the refused one: %v", err)
	}
	if got := tr.Confirmed(); got != 0x1100 {
		t.Errorf("Confirmed() = %s, want 0/1100", got)
	}
}

func TestTrackerInFlightAndPending(t *testing.T) {
	budget := checkpoint.NewBudget(checkpoint.Limits{})
	tr := checkpoint.New(0x1000, budget)
	if tr.Pending() {
		t.Error("Pending() on a new tracker")
	}
	x, _ := tr.OpenAt(time.Time{})
	if !tr.Pending() {
		t.Error("Pending() = false with an open transaction")
	}
	a := tr.Add(x, 100)
	b := tr.Add(x, 23)
	if e, n := budget.InFlight(); e != 2 || n != 123 {
		t.Errorf("InFlight() = %d, %d, want 2, 123", e, n)
	}
	if err := tr.Seal(x, 0x1100); err != nil {
		t.Fatal(err)
	}
	tr.Done(b)
	if e, n := budget.InFlight(); e != 1 || n != 100 {
		t.Errorf("InFlight() = %d, %d, want 1, 100", e, n)
	}
	if !tr.Pending() {
		t.Error("Pending() = false with an unhandled event")
	}
	tr.Done(a)
	if e, n := budget.InFlight(); e != 0 || n != 0 {
		t.Errorf("InFlight() = %d, %d, want 0, 0", e, n)
	}
	if tr.Pending() {
		t.Error("Pending() = true after everything was handled")
	}
}

func TestTrackerFull(t *testing.T) {
	tests := []struct {
		name   string
		limits checkpoint.Limits
		sizes  []int
		want   []bool // Full() after each Add
	}{
		{name: "unbounded", limits: checkpoint.Limits{}, sizes: []int{1 << 30, 1 << 30, 1}, want: []bool{false, false, false}},
		{name: "negative limits are unbounded", limits: checkpoint.Limits{MaxEvents: -1, MaxBytes: -1}, sizes: []int{1 << 20, 1}, want: []bool{false, false}},
		{name: "event count", limits: checkpoint.Limits{MaxEvents: 3}, sizes: []int{1, 1, 1}, want: []bool{false, false, true}},
		{name: "bytes", limits: checkpoint.Limits{MaxBytes: 100}, sizes: []int{40, 40, 20}, want: []bool{false, false, true}},
		{name: "bytes, one big event", limits: checkpoint.Limits{MaxBytes: 100}, sizes: []int{500}, want: []bool{true}},
		{name: "both: bytes first", limits: checkpoint.Limits{MaxEvents: 10, MaxBytes: 100}, sizes: []int{60, 60}, want: []bool{false, true}},
		{name: "both: count first", limits: checkpoint.Limits{MaxEvents: 2, MaxBytes: 100}, sizes: []int{1, 1}, want: []bool{false, true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			budget := checkpoint.NewBudget(tc.limits)
			tr := checkpoint.New(0x1000, budget)
			if budget.Full() {
				t.Fatal("Full() on an empty tracker")
			}
			x, _ := tr.OpenAt(time.Time{})
			var ks []checkpoint.Ticket
			for i, n := range tc.sizes {
				ks = append(ks, tr.Add(x, n))
				if got := budget.Full(); got != tc.want[i] {
					t.Errorf("after Add #%d (%d bytes): Full() = %v, want %v", i, n, got, tc.want[i])
				}
			}
			for _, k := range ks {
				tr.Done(k)
			}
			if budget.Full() {
				t.Error("Full() after every event was handled")
			}
		})
	}
}

func TestTrackerWait(t *testing.T) {
	defer leak.VerifyNone(t)
	budget := checkpoint.NewBudget(checkpoint.Limits{MaxEvents: 2})
	tr := checkpoint.New(0x1000, budget)
	x, _ := tr.OpenAt(time.Time{})

	// Not full: returns at once, even with a cancelled context.
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := budget.Wait(cancelled); err != nil {
		t.Fatalf("Wait when not full: %v", err)
	}

	a := tr.Add(x, 1)
	b := tr.Add(x, 1)
	if !budget.Full() {
		t.Fatal("not Full() at the limit")
	}

	// Full and nothing frees space: the context ends the wait.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	err := budget.Wait(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait while full = %v, want context.DeadlineExceeded", err)
	}

	// Done on another goroutine releases the waiter.
	var wg sync.WaitGroup
	wg.Go(func() {
		time.Sleep(10 * time.Millisecond)
		tr.Done(a)
	})
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := budget.Wait(ctx); err != nil {
		t.Fatalf("Wait after Done: %v", err)
	}
	wg.Wait()
	if budget.Full() {
		t.Error("Full() after Wait returned")
	}
	tr.Done(b)
}

func TestTrackerWaitDrained(t *testing.T) {
	defer leak.VerifyNone(t)
	budget := checkpoint.NewBudget(checkpoint.Limits{})
	tr := checkpoint.New(0x1000, budget)
	if err := budget.WaitDrained(context.Background()); err != nil {
		t.Fatalf("WaitDrained on an empty tracker: %v", err)
	}
	x, _ := tr.OpenAt(time.Time{})
	ks := []checkpoint.Ticket{tr.Add(x, 1), tr.Add(x, 1), tr.Add(x, 1)}
	if err := tr.Seal(x, 0x1100); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	err := budget.WaitDrained(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitDrained with events in flight = %v, want context.DeadlineExceeded", err)
	}

	var wg sync.WaitGroup
	for _, k := range ks {
		wg.Go(func() {
			time.Sleep(5 * time.Millisecond)
			tr.Done(k)
		})
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := budget.WaitDrained(ctx); err != nil {
		t.Fatalf("WaitDrained: %v", err)
	}
	if e, _ := budget.InFlight(); e != 0 {
		t.Errorf("WaitDrained returned with %d events in flight", e)
	}
	wg.Wait()
	if got := tr.Confirmed(); got != 0x1100 {
		t.Errorf("Confirmed() = %s, want 0/1100", got)
	}
}

// panics reports whether f panics.
func panics(f func()) (panicked bool) {
	defer func() { panicked = recover() != nil }()
	f()
	return false
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	if !panics(f) {
		t.Errorf("%s did not panic", what)
	}
}

func TestTrackerDoneTwicePanics(t *testing.T) {
	t.Run("same transaction, before confirmation", func(t *testing.T) {
		tr := checkpoint.New(0x1000, nil)
		x, _ := tr.OpenAt(time.Time{})
		k := tr.Add(x, 1)
		tr.Done(k)
		mustPanic(t, "second Done", func() { tr.Done(k) })
	})
	t.Run("same transaction, after confirmation", func(t *testing.T) {
		tr := checkpoint.New(0x1000, nil)
		x, _ := tr.OpenAt(time.Time{})
		k := tr.Add(x, 1)
		if err := tr.Seal(x, 0x1100); err != nil {
			t.Fatal(err)
		}
		tr.Done(k)
		if got := tr.Confirmed(); got != 0x1100 {
			t.Fatalf("Confirmed() = %s, want 0/1100", got)
		}
		mustPanic(t, "second Done", func() { tr.Done(k) })
	})
	// The second Done of one event must not count as another event of the
	// same transaction: that would confirm past the unhandled one.
	t.Run("same transaction, one of two events twice", func(t *testing.T) {
		tr := checkpoint.New(0x1000, nil)
		x, _ := tr.OpenAt(time.Time{})
		a := tr.Add(x, 1)
		tr.Add(x, 1) // never handled
		if err := tr.Seal(x, 0x1100); err != nil {
			t.Fatal(err)
		}
		tr.Done(a)
		mustPanic(t, "second Done of the same ticket", func() { tr.Done(a) })
		if got := tr.Confirmed(); got != 0x1000 {
			t.Errorf("Confirmed() = %s, want 0/1000: the second event was never handled", got)
		}
	})
	// A stale ticket of a confirmed transaction must not count as an event
	// of a later transaction: that would confirm past an unhandled event
	// (INV-1) instead of panicking.
	t.Run("after confirmation and a new transaction", func(t *testing.T) {
		budget := checkpoint.NewBudget(checkpoint.Limits{})
		tr := checkpoint.New(0x1000, budget)
		x, _ := tr.OpenAt(time.Time{})
		k := tr.Add(x, 1)
		if err := tr.Seal(x, 0x1100); err != nil {
			t.Fatal(err)
		}
		tr.Done(k)
		if got := tr.Confirmed(); got != 0x1100 {
			t.Fatalf("Confirmed() = %s, want 0/1100", got)
		}
		y, _ := tr.OpenAt(time.Time{})
		tr.Add(y, 1) // never handled
		if err := tr.Seal(y, 0x1200); err != nil {
			t.Fatal(err)
		}
		mustPanic(t, "second Done of the first transaction's ticket", func() { tr.Done(k) })
		if got := tr.Confirmed(); got != 0x1100 {
			t.Errorf("Confirmed() = %s, want 0/1100: the second transaction's event was never handled", got)
		}
		if e, _ := budget.InFlight(); e != 1 {
			t.Errorf("InFlight() = %d events, want 1", e)
		}
	})
}

// TestTrackerPosition: Watermark follows the watermark, carries the commit
// time of the last confirmed transaction and counts confirmed transactions
// only (an Idle move changes the LSN, not the count or the commit time).
func TestTrackerPosition(t *testing.T) {
	tr := checkpoint.New(0x100, nil)
	if got := tr.Watermark(); got.LSN != 0x100 || got.Txns != 0 || !got.Commit.IsZero() {
		t.Fatalf("fresh tracker: Watermark = %+v, want LSN 0/100, 0 txns, no commit time", got)
	}
	t1 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	t2 := t1.Add(time.Second)
	x1, _ := tr.OpenAt(t1)
	k1 := tr.Add(x1, 10)
	if err := tr.Seal(x1, 0x200); err != nil {
		t.Fatal(err)
	}
	x2, _ := tr.OpenAt(t2)
	k2 := tr.Add(x2, 10)
	if err := tr.Seal(x2, 0x300); err != nil {
		t.Fatal(err)
	}
	if got := tr.Watermark(); got.LSN != 0x100 || got.Txns != 0 {
		t.Fatalf("nothing done: Watermark = %+v, want LSN 0/100, 0 txns", got)
	}
	tr.Done(k2)
	if got := tr.Watermark(); got.LSN != 0x100 || got.Txns != 0 {
		t.Fatalf("second done, first pending: Watermark = %+v, want LSN 0/100, 0 txns", got)
	}
	tr.Done(k1)
	if got := tr.Watermark(); got.LSN != 0x300 || got.Txns != 2 || !got.Commit.Equal(t2) {
		t.Fatalf("both done: Watermark = %+v, want LSN 0/300, 2 txns, commit %s", got, t2)
	}
	if !tr.Idle(0x400) {
		t.Fatal("Idle(0/400) with nothing in flight did not move the watermark")
	}
	if got := tr.Watermark(); got.LSN != 0x400 || got.Txns != 2 || !got.Commit.Equal(t2) {
		t.Fatalf("after Idle: Watermark = %+v, want LSN 0/400, still 2 txns and commit %s", got, t2)
	}
}

// TestHoldCapsTheWatermark: while held, handled transactions past the
// hold are not reported confirmed (Confirmed, Position, Idle's
// keepalives); Release reports them.
func TestHoldCapsTheWatermark(t *testing.T) {
	tr := checkpoint.New(0x100, nil)
	tr.Hold(0x200)
	for _, end := range []pglogrepl.LSN{0x180, 0x300} {
		x, err := tr.OpenAt(time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		k := tr.Add(x, 1)
		if err := tr.Seal(x, end); err != nil {
			t.Fatal(err)
		}
		tr.Done(k)
	}
	if got := tr.Confirmed(); got != 0x200 {
		t.Errorf("held at 0/200: Confirmed %s", got)
	}
	tr.Idle(0x400)
	if p := tr.Watermark(); p.LSN != 0x200 || p.Txns != 0 {
		t.Errorf("held at 0/200: Position %+v, want 0/200 and the count at the hold", p)
	}
	// A second hold while held (data loss reported while the first is
	// pending) never lifts the first.
	tr.Hold(tr.Confirmed())
	tr.Hold(0x350)
	if got := tr.Confirmed(); got != 0x200 {
		t.Errorf("held twice: Confirmed %s, want the first hold 0/200", got)
	}
	if got := tr.Handled(); got != 0x400 {
		t.Errorf("Handled %s, want 0/400 whatever the hold", got)
	}
	tr.Release()
	if got := tr.Confirmed(); got != 0x400 {
		t.Errorf("released: Confirmed %s, want 0/400", got)
	}
	if p := tr.Watermark(); p.LSN != 0x400 || p.Txns != 2 {
		t.Errorf("released: Position %+v", p)
	}
}

// TestTrackerStarted: where the stream started is the position New was
// given until Recorded notes a higher one (another walpost confirmed the
// slot in between); a lower one changes nothing.
func TestTrackerStarted(t *testing.T) {
	tr := checkpoint.New(0x100, nil)
	if got := tr.Started(); got != 0x100 {
		t.Errorf("Started after New(0/100) = %s, want 0/100", got)
	}
	tr.Recorded(0x80)
	if got := tr.Started(); got != 0x100 {
		t.Errorf("Started after Recorded(0/80) = %s, want 0/100", got)
	}
	tr.Recorded(0x200)
	if got := tr.Started(); got != 0x200 {
		t.Errorf("Started after Recorded(0/200) = %s, want 0/200", got)
	}
}
