package checkpoint_test

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"pgregory.net/rapid"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/internal/leak"
)

const (
	modelPartitions = 4 // Kafka partitions acks come from
	modelMaxEvents  = 5 // events per transaction: 1..modelMaxEvents
)

type modelEvent struct {
	k       checkpoint.Ticket
	bytes   int
	handled bool
}

type modelTxn struct {
	events []*modelEvent
	sealed bool
	end    pglogrepl.LSN
}

func (x *modelTxn) handled() bool {
	for _, e := range x.events {
		if !e.handled {
			return false
		}
	}
	return true
}

// model is the reference the tracker is checked against after every step.
type model struct {
	tr        *checkpoint.Tracker
	budget    *checkpoint.Budget
	txns      []*modelTxn
	open      *modelTxn
	openX     *checkpoint.Txn // the tracker's handle of open
	lastEnd   pglogrepl.LSN   // last sealed end or idle WAL end
	confirmed pglogrepl.LSN   // what Confirmed must return
	seen      pglogrepl.LSN   // last value Confirmed returned
	queues    [modelPartitions][]*modelEvent
}

// expected advances the model's watermark over the fully handled sealed
// prefix (INV-1) and returns it.
func (m *model) expected() pglogrepl.LSN {
	for _, x := range m.txns {
		if !x.sealed || !x.handled() {
			break
		}
		if x.end > m.confirmed {
			m.confirmed = x.end
		}
	}
	// Drop the confirmed prefix so the walk stays short.
	for len(m.txns) > 0 && m.txns[0].sealed && m.txns[0].handled() {
		m.txns = m.txns[1:]
	}
	return m.confirmed
}

func (m *model) quiet() bool {
	if m.open != nil {
		return false
	}
	for _, x := range m.txns {
		if !x.handled() {
			return false
		}
	}
	return true
}

func (m *model) unhandled() []*modelEvent {
	var es []*modelEvent
	for _, x := range m.txns {
		for _, e := range x.events {
			if !e.handled {
				es = append(es, e)
			}
		}
	}
	return es
}

// check is run after every action.
func (m *model) check(t *rapid.T) {
	c := m.tr.Confirmed()
	if c < m.seen {
		t.Fatalf("Confirmed went back from %s to %s (INV-4)", m.seen, c)
	}
	m.seen = c
	// INV-1, stated directly: not past any transaction that has an
	// unhandled event or follows one, nor past an open transaction.
	for _, x := range m.txns {
		if x.handled() && x.sealed {
			continue
		}
		if x.sealed && c >= x.end {
			t.Fatalf("Confirmed() = %s reaches the end %s of a transaction with an unhandled event or behind one", c, x.end)
		}
	}
	if want := m.expected(); c != want {
		t.Fatalf("Confirmed() = %s, want %s", c, want)
	}
	if m.quiet() && c != m.lastEnd {
		t.Fatalf("everything handled: Confirmed() = %s, want the last end %s", c, m.lastEnd)
	}
	var events int
	var bytes int64
	for _, e := range m.unhandled() {
		events++
		bytes += int64(e.bytes)
	}
	if ge, gb := m.budget.InFlight(); ge != events || gb != bytes {
		t.Fatalf("InFlight() = %d, %d, want %d, %d", ge, gb, events, bytes)
	}
	if got, want := m.tr.Pending(), !m.quiet(); got != want {
		t.Fatalf("Pending() = %v, want %v", got, want)
	}
}

func (m *model) markHandled(e *modelEvent) {
	e.handled = true
	for p := range m.queues {
		m.queues[p] = slices.DeleteFunc(m.queues[p], func(o *modelEvent) bool { return o == e })
	}
}

// TestTrackerModel drives the tracker with random transactions, acks that
// arrive per partition in order but interleaved across partitions (and
// concurrently, from several goroutines), poisoned events handled out of
// order, and keepalive idle advances, and compares it with a model after
// every step.
func TestTrackerModel(t *testing.T) {
	defer leak.VerifyNone(t)
	rapid.Check(t, func(t *rapid.T) {
		start := pglogrepl.LSN(rapid.Uint64Range(0, 1<<40).Draw(t, "start"))
		budget := checkpoint.NewBudget(checkpoint.Limits{})
		m := &model{tr: checkpoint.New(start, budget), budget: budget, lastEnd: start, confirmed: start, seen: start}
		lsnStep := rapid.Uint64Range(1, 0x200)

		t.Repeat(map[string]func(*rapid.T){
			"": m.check,
			"open": func(t *rapid.T) {
				if m.open != nil {
					t.Skip("a transaction is open")
				}
				x, err := m.tr.OpenAt(time.Time{})
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				mt := &modelTxn{}
				m.txns = append(m.txns, mt)
				m.open, m.openX = mt, x
			},
			"add": func(t *rapid.T) {
				if m.open == nil || len(m.open.events) >= modelMaxEvents {
					t.Skip("no open transaction with room")
				}
				n := rapid.IntRange(0, 4096).Draw(t, "bytes")
				p := rapid.IntRange(0, modelPartitions-1).Draw(t, "partition")
				e := &modelEvent{k: m.tr.Add(m.openX, n), bytes: n}
				m.open.events = append(m.open.events, e)
				m.queues[p] = append(m.queues[p], e)
			},
			"seal": func(t *rapid.T) {
				// Also without events: the tracker merges an empty
				// transaction into the one before it.
				if m.open == nil {
					t.Skip("no open transaction")
				}
				end := m.lastEnd + pglogrepl.LSN(lsnStep.Draw(t, "step"))
				if err := m.tr.Seal(m.openX, end); err != nil {
					t.Fatalf("Seal(%s) after %s: %v", end, m.lastEnd, err)
				}
				m.open.sealed, m.open.end = true, end
				m.lastEnd = end
				m.open, m.openX = nil, nil
			},
			"empty": func(t *rapid.T) {
				// A run of transactions without events (PG 14's empty
				// Begin/Commit), while earlier events may be in flight.
				if m.open != nil {
					t.Skip("a transaction is open")
				}
				for range rapid.IntRange(1, 20).Draw(t, "empties") {
					x, err := m.tr.OpenAt(time.Time{})
					if err != nil {
						t.Fatalf("Open: %v", err)
					}
					end := m.lastEnd + pglogrepl.LSN(lsnStep.Draw(t, "step"))
					if err := m.tr.Seal(x, end); err != nil {
						t.Fatalf("Seal(%s) of an empty transaction after %s: %v", end, m.lastEnd, err)
					}
					m.txns = append(m.txns, &modelTxn{sealed: true, end: end})
					m.lastEnd = end
				}
			},
			"sealBelow": func(t *rapid.T) {
				if m.open == nil {
					t.Skip("no open transaction")
				}
				end := pglogrepl.LSN(rapid.Uint64Range(0, uint64(m.lastEnd)).Draw(t, "end"))
				if err := m.tr.Seal(m.openX, end); !errors.Is(err, checkpoint.ErrRegression) {
					t.Fatalf("Seal(%s) at or below %s = %v, want ErrRegression", end, m.lastEnd, err)
				}
			},
			"ack": func(t *rapid.T) {
				// Each chosen partition acks a run of its oldest events
				// on its own goroutine, while the reader polls Confirmed
				// and may send one keepalive through Idle.
				var runs [][]*modelEvent
				for p := range m.queues {
					if len(m.queues[p]) == 0 || !rapid.Bool().Draw(t, "ackPartition") {
						continue
					}
					n := rapid.IntRange(1, len(m.queues[p])).Draw(t, "acks")
					runs = append(runs, slices.Clone(m.queues[p][:n]))
				}
				if len(runs) == 0 {
					t.Skip("nothing to ack")
				}
				idle := rapid.Bool().Draw(t, "idle")
				walEnd := m.lastEnd + pglogrepl.LSN(lsnStep.Draw(t, "walEnd"))
				before := m.seen

				// Upper bound once every run is done.
				for _, run := range runs {
					for _, e := range run {
						m.markHandled(e)
					}
				}
				upper := m.expected()
				quietAfter := m.quiet()
				if idle && quietAfter && walEnd > upper {
					upper = walEnd
				}

				var wg sync.WaitGroup
				for _, run := range runs {
					wg.Go(func() {
						for _, e := range run {
							m.tr.Done(e.k)
						}
					})
				}
				stop := make(chan struct{})
				var polled []pglogrepl.LSN
				var moved bool
				var reader sync.WaitGroup
				reader.Go(func() {
					for i := 0; ; i++ {
						polled = append(polled, m.tr.Confirmed())
						if idle && i == 1 {
							moved = m.tr.Idle(walEnd)
						}
						select {
						case <-stop:
							return
						default:
						}
					}
				})
				wg.Wait()
				close(stop)
				reader.Wait()

				prev := before
				for _, c := range polled {
					if c < prev {
						t.Fatalf("Confirmed went back from %s to %s while acks arrived", prev, c)
					}
					if c > upper {
						t.Fatalf("Confirmed() = %s while acks arrived, beyond the most they allow, %s", c, upper)
					}
					prev = c
				}
				if moved {
					if !quietAfter {
						t.Fatalf("Idle(%s) moved the watermark with events unhandled or a transaction open", walEnd)
					}
					m.confirmed = walEnd
					m.lastEnd = walEnd
				}
				if prev > m.seen {
					m.seen = prev
				}
			},
			"poison": func(t *rapid.T) {
				// A poisoned event is handled when its poison row
				// commits: any event, out of partition order.
				es := m.unhandled()
				if len(es) == 0 {
					t.Skip("nothing in flight")
				}
				e := rapid.SampledFrom(es).Draw(t, "poisoned")
				m.tr.Done(e.k)
				m.markHandled(e)
			},
			"idle": func(t *rapid.T) {
				var walEnd pglogrepl.LSN
				if rapid.Bool().Draw(t, "idleAhead") {
					walEnd = m.lastEnd + pglogrepl.LSN(lsnStep.Draw(t, "walEnd"))
				} else {
					walEnd = pglogrepl.LSN(rapid.Uint64Range(0, uint64(m.lastEnd)).Draw(t, "walEnd"))
				}
				prev := m.expected()
				want := m.quiet() && walEnd > prev
				if got := m.tr.Idle(walEnd); got != want {
					t.Fatalf("Idle(%s) = %v, want %v (open=%v, in flight=%d, confirmed=%s)",
						walEnd, got, want, m.open != nil, len(m.unhandled()), prev)
				}
				if want {
					m.confirmed = walEnd
					if walEnd > m.lastEnd {
						m.lastEnd = walEnd
					}
				}
			},
			"confirmed": func(t *rapid.T) {
				// Polling must not change anything; check does the rest.
				a, b := m.tr.Confirmed(), m.tr.Confirmed()
				if a != b {
					t.Fatalf("two Confirmed calls in a row: %s then %s", a, b)
				}
			},
		})
	})
}

// TestTrackerConcurrent: several goroutines call Done while the reader
// opens, fills and seals transactions and polls Confirmed. Every event is
// marked handled before its Done, so whatever Confirmed returns, every
// transaction at or below it must be fully marked. Run with -race.
func TestTrackerConcurrent(t *testing.T) {
	defer leak.VerifyNone(t)
	const (
		workers = 8
		txns    = 2000
		start   = pglogrepl.LSN(0x16B3748)
	)
	budget := checkpoint.NewBudget(checkpoint.Limits{MaxEvents: 64})
	tr := checkpoint.New(start, budget)

	type txn struct {
		end     pglogrepl.LSN
		mu      sync.Mutex
		total   int
		handled int
	}
	type work struct {
		x *txn
		k checkpoint.Ticket
	}
	queues := make([]chan work, workers)
	var wg sync.WaitGroup
	for i := range queues {
		queues[i] = make(chan work, 16)
		wg.Go(func() {
			for w := range queues[i] {
				w.x.mu.Lock()
				w.x.handled++
				w.x.mu.Unlock()
				tr.Done(w.k)
			}
		})
	}

	var all []*txn
	checked := 0 // all[:checked] were seen fully handled
	end := start
	prev := tr.Confirmed()
	checkConfirmed := func() {
		c := tr.Confirmed()
		if c < prev {
			t.Fatalf("Confirmed went back from %s to %s", prev, c)
		}
		prev = c
		for ; checked < len(all) && all[checked].end <= c; checked++ {
			x := all[checked]
			x.mu.Lock()
			h := x.handled
			x.mu.Unlock()
			if h != x.total {
				t.Fatalf("Confirmed() = %s covers the transaction ending %s with %d of %d events handled", c, x.end, h, x.total)
			}
		}
	}
	ctx := t.Context()
	for i := range txns {
		x, err := tr.OpenAt(time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		mt := &txn{total: 1 + i%7}
		for j := range mt.total {
			if err := budget.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			k := tr.Add(x, 100)
			queues[(i+j*3)%workers] <- work{x: mt, k: k}
			if j%3 == 0 {
				checkConfirmed()
			}
		}
		end += pglogrepl.LSN(1 + i%97)
		mt.end = end
		all = append(all, mt)
		if err := tr.Seal(x, end); err != nil {
			t.Fatal(err)
		}
		checkConfirmed()
	}
	for _, q := range queues {
		close(q)
	}
	wg.Wait()
	checkConfirmed()
	if got := tr.Confirmed(); got != end {
		t.Errorf("Confirmed() = %s after every event was handled, want the last end %s", got, end)
	}
	if e, b := budget.InFlight(); e != 0 || b != 0 {
		t.Errorf("InFlight() = %d, %d after every event was handled", e, b)
	}
}
