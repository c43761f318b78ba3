package checkpoint

import (
	"context"
	"sync/atomic"
)

// Limits bound the in-flight events (INV-6).
type Limits struct {
	MaxEvents int   // events added and not yet done; ≤ 0 means unbounded
	MaxBytes  int64 // their bytes; ≤ 0 means unbounded
}

// Budget counts the events handed on and not yet done, against Limits
// (INV-6). The reader owns it: it stops reading WAL while Full and waits
// for Freed. A Tracker given the budget takes each event's place in Add and
// gives it back in Done.
type Budget struct {
	limits Limits
	events atomic.Int64
	bytes  atomic.Int64
	freed  chan struct{} // signalled (non-blocking) when an event is done
}

// NewBudget returns an empty budget bounded by limits.
func NewBudget(limits Limits) *Budget {
	return &Budget{limits: limits, freed: make(chan struct{}, 1)}
}

func (b *Budget) take(bytes int64) {
	b.events.Add(1)
	b.bytes.Add(bytes)
}

func (b *Budget) give(bytes int64) {
	b.events.Add(-1)
	b.bytes.Add(-bytes)
	select {
	case b.freed <- struct{}{}:
	default:
	}
}

// InFlight returns the number and bytes of events added and not yet done.
func (b *Budget) InFlight() (events int, bytes int64) {
	return int(b.events.Load()), b.bytes.Load()
}

// Full reports whether the in-flight limits are reached.
func (b *Budget) Full() bool {
	l := b.limits
	return (l.MaxEvents > 0 && b.events.Load() >= int64(l.MaxEvents)) ||
		(l.MaxBytes > 0 && b.bytes.Load() >= l.MaxBytes)
}

// Freed is signalled after an event is done; a reader waiting for space
// re-checks Full when it fires.
func (b *Budget) Freed() <-chan struct{} { return b.freed }

// Wait blocks until the budget is not full or ctx ends; it returns
// ctx.Err() in the latter case.
func (b *Budget) Wait(ctx context.Context) error {
	for b.Full() {
		select {
		case <-b.freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// WaitDrained blocks until no event is in flight or ctx ends.
func (b *Budget) WaitDrained(ctx context.Context) error {
	for b.events.Load() > 0 {
		select {
		case <-b.freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Pause is the isolator's hold on the reader: while it is on, the reader
// stops reading WAL (and keeps sending status updates) so failed records
// are isolated without new ones arriving.
type Pause struct {
	on      atomic.Bool
	resumed chan struct{} // signalled (non-blocking) when the pause ends
}

// NewPause returns a pause that is off.
func NewPause() *Pause { return &Pause{resumed: make(chan struct{}, 1)} }

// Set turns the pause on or off.
func (p *Pause) Set(on bool) {
	p.on.Store(on)
	if !on {
		select {
		case p.resumed <- struct{}{}:
		default:
		}
	}
}

// On reports whether the reader must stop reading.
func (p *Pause) On() bool { return p.on.Load() }

// Resumed is signalled when the pause ends; a waiting reader re-checks On.
func (p *Pause) Resumed() <-chan struct{} { return p.resumed }
