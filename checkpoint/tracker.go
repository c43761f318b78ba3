package checkpoint

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
)

// ErrRegression is returned when an operation would move the watermark
// backwards or seal transactions out of commit order.
var ErrRegression = errors.New("checkpoint regression")

// Txn is one transaction in the FIFO.
type Txn struct {
	pending int
	sealed  bool
	end     pglogrepl.LSN
	commit  time.Time
	gen     uint64   // bumped when the Txn is reused from the pool
	added   int      // events added, the next event's index
	done    []uint64 // bitset of events done, by index
}

// Ticket identifies one event for Done.
type Ticket struct {
	txn   *Txn
	gen   uint64
	idx   int
	bytes int64
}

// Tracker is the frontier: the transaction FIFO and its low watermark.
type Tracker struct {
	mu        sync.Mutex
	fifo      []*Txn // sealed or open transactions, commit order; fifo[head:] live
	head      int
	open      *Txn
	confirmed pglogrepl.LSN
	lastSeal  pglogrepl.LSN
	commit    time.Time // commit time of the last confirmed transaction
	txns      uint64    // transactions confirmed
	budget    *Budget   // takes each event's place in Add, gives it back in Done; nil: none
	// Hold: while held, the watermark reported (Confirmed, Watermark)
	// stays at or below hold, whatever was handled.
	held       bool
	hold       pglogrepl.LSN
	holdCommit time.Time
	holdTxns   uint64
	// started: where the stream started (Started).
	started pglogrepl.LSN
	pool    []*Txn
}

// New returns a tracker whose watermark starts at start, the slot's
// confirmed_flush_lsn. Its events count against budget (nil: no bound).
func New(start pglogrepl.LSN, budget *Budget) *Tracker {
	return &Tracker{confirmed: start, lastSeal: start, started: start, budget: budget}
}

// OpenAt starts a transaction committed at commit (for OldestPending).
// Only one may be open at a time.
func (t *Tracker) OpenAt(commit time.Time) (*Txn, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open != nil {
		return nil, fmt.Errorf("%w: begin while a transaction is open", ErrRegression)
	}
	var x *Txn
	if n := len(t.pool); n > 0 {
		x = t.pool[n-1]
		t.pool = t.pool[:n-1]
		done := x.done[:0]
		*x = Txn{gen: x.gen + 1, done: done}
	} else {
		x = &Txn{}
	}
	x.commit = commit
	t.open = x
	t.fifo = append(t.fifo, x)
	return x, nil
}

// Add registers one event of the open transaction x, of the given size in
// bytes, and returns its ticket for Done.
func (t *Tracker) Add(x *Txn, bytes int) Ticket {
	t.mu.Lock()
	x.pending++
	idx := x.added
	x.added++
	if w := idx / 64; w >= len(x.done) {
		x.done = append(x.done, 0)
	}
	t.mu.Unlock()
	if t.budget != nil {
		t.budget.take(int64(bytes))
	}
	return Ticket{txn: x, gen: x.gen, idx: idx, bytes: int64(bytes)}
}

// Seal closes the open transaction x with its TransactionEndLSN.
func (t *Tracker) Seal(x *Txn, end pglogrepl.LSN) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open != x {
		return fmt.Errorf("%w: seal of a transaction that is not open", ErrRegression)
	}
	// INV-4: transactions arrive in commit order, so end LSNs grow.
	if end <= t.lastSeal {
		return fmt.Errorf("%w: transaction end %s at or before the previous end %s", ErrRegression, end, t.lastSeal)
	}
	t.lastSeal = end
	t.open = nil
	// INV-6 for transactions: one without events (PG 14 sends every write
	// transaction as an empty Begin/Commit) directly behind a queued one
	// merges into it by extending its end, so the FIFO is bounded by
	// events, not transactions. INV-1 holds: the merged entry is confirmed
	// only when the earlier transaction's events are all handled, and its
	// new end is only reached past them. x is last in the FIFO (it was
	// open), the one before it is sealed (only one is open at a time).
	if n := len(t.fifo); x.added == 0 && n-t.head >= 2 {
		t.fifo[n-2].end = end
		t.fifo[n-1] = nil
		t.fifo = t.fifo[:n-1]
		t.pool = append(t.pool, x)
		return nil
	}
	x.sealed = true
	x.end = end
	return nil
}

// Done marks the event of ticket k as handled (acked by Kafka or committed
// to the poison table). It may be called from any goroutine, once per
// ticket.
func (t *Tracker) Done(k Ticket) {
	t.mu.Lock()
	x := k.txn
	w, bit := k.idx/64, uint64(1)<<(k.idx%64)
	// INV-1: a second Done for one event, or a stale ticket of a
	// recycled transaction, would release an unhandled event.
	if x.gen != k.gen || w >= len(x.done) || x.done[w]&bit != 0 {
		t.mu.Unlock()
		panic("checkpoint: Done called twice for one event")
	}
	x.done[w] |= bit
	x.pending--
	t.mu.Unlock()
	if t.budget != nil {
		t.budget.give(k.bytes)
	}
}

// Confirmed advances past every fully handled sealed transaction at the
// head of the FIFO and returns the watermark.
func (t *Tracker) Confirmed() pglogrepl.LSN {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance()
	if t.held && t.confirmed > t.hold {
		return t.hold
	}
	return t.confirmed
}

// Hold caps the watermark Confirmed and Watermark report at at (or the
// watermark, when it is higher) until Release: events are handled and the
// FIFO advances as usual, only nothing past at is reported to be
// confirmed. A handler that skips events on a claim it has not verified
// yet holds the tracker where its own knowledge ends (INV-1, INV-11).
func (t *Tracker) Hold(at pglogrepl.LSN) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance()
	// INV-4: never below what was reported already. Past the hold,
	// Watermark reports the commit time and count of the hold's start:
	// older, so a recover reading it re-sends more, never less. A hold
	// while held keeps the lower of the two: the first hold's claim is
	// still unverified.
	reported := t.confirmed
	if t.held {
		reported = min(t.confirmed, t.hold)
		t.hold = min(t.hold, max(at, reported))
		return
	}
	t.held, t.hold = true, max(at, reported)
	t.holdCommit, t.holdTxns = t.commit, t.txns
}

// Recorded notes that PostgreSQL itself recorded at: the slot's position,
// read once replication started, where the server started the stream
// (Started). A Hold below it rises to it, so no status update reports
// less than the slot holds (INV-4): another walpost may have confirmed
// the slot past the hold, which was read before.
func (t *Tracker) Recorded(at pglogrepl.LSN) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.started = max(t.started, at)
	if t.held && t.hold < at {
		t.hold = at
	}
}

// Started is where the server started the stream: the slot's position
// New was given, or the higher one Recorded noted (another walpost
// confirmed the slot in between, a takeover).
func (t *Tracker) Started() pglogrepl.LSN {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.started
}

// Handled is the watermark as the handled events move it, a Hold aside:
// every event below it was handled (skipped, acknowledged or
// quarantined).
func (t *Tracker) Handled() pglogrepl.LSN {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance()
	return t.confirmed
}

// Release ends a Hold: the watermark reported moves to what was handled.
func (t *Tracker) Release() {
	t.mu.Lock()
	t.held = false
	t.mu.Unlock()
}

func (t *Tracker) advance() {
	for t.head < len(t.fifo) {
		x := t.fifo[t.head]
		// INV-1: stop at the first transaction that is open or has an
		// unhandled event.
		if !x.sealed || x.pending > 0 {
			break
		}
		t.confirmed = x.end
		t.commit = x.commit
		t.txns++
		t.fifo[t.head] = nil
		t.head++
		t.pool = append(t.pool, x)
	}
	if t.head == len(t.fifo) {
		t.fifo = t.fifo[:0]
		t.head = 0
	} else if t.head > 1024 && t.head*2 > len(t.fifo) {
		n := copy(t.fifo, t.fifo[t.head:])
		clear(t.fifo[n:])
		t.fifo = t.fifo[:n]
		t.head = 0
	}
}

// Watermark is the confirmed LSN with what a durable record of it needs.
type Watermark struct {
	LSN    pglogrepl.LSN // the watermark (Confirmed)
	Commit time.Time     // commit time of the last confirmed transaction; zero before the first
	Txns   uint64        // transactions confirmed by this tracker; moves only when one is
}

// Watermark advances like Confirmed and returns the watermark, the commit
// time of the last confirmed transaction and how many were confirmed.
func (t *Tracker) Watermark() Watermark {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance()
	if t.held && t.confirmed > t.hold {
		return Watermark{LSN: t.hold, Commit: t.holdCommit, Txns: t.holdTxns}
	}
	return Watermark{LSN: t.confirmed, Commit: t.commit, Txns: t.txns}
}

// Idle confirms walEnd, a keepalive's ServerWALEnd, when nothing is in
// flight and no transaction is open or waiting. It reports whether the
// watermark moved. A walEnd at or below the watermark is ignored.
func (t *Tracker) Idle(walEnd pglogrepl.LSN) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance()
	// INV-1: only when every received event is handled: each belongs to
	// a transaction that stays in the FIFO until its events are done.
	if t.open != nil || t.head < len(t.fifo) {
		return false
	}
	if walEnd <= t.confirmed {
		return false
	}
	t.confirmed = walEnd
	if walEnd > t.lastSeal {
		t.lastSeal = walEnd
	}
	return true
}

// Pending reports whether any transaction is open or not yet confirmed.
func (t *Tracker) Pending() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance()
	return t.open != nil || t.head < len(t.fifo)
}

// OldestPending returns the commit time of the oldest transaction not yet
// confirmed, and false when none is pending.
func (t *Tracker) OldestPending() (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance()
	if t.head < len(t.fifo) {
		return t.fifo[t.head].commit, true
	}
	return time.Time{}, false
}
