package replication

import (
	"context"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/checkpoint"
)

// Frontier is the watermark the stream feeds: transactions in commit order,
// their events, and the position that may be confirmed
// (checkpoint.Tracker).
type Frontier interface {
	OpenAt(commit time.Time) (*checkpoint.Txn, error)
	Add(x *checkpoint.Txn, bytes int) checkpoint.Ticket
	Seal(x *checkpoint.Txn, end pglogrepl.LSN) error
	Confirmed() pglogrepl.LSN
	Idle(walEnd pglogrepl.LSN) bool
	// Recorded: the slot's position read once replication started; a
	// hold below it rises to it (checkpoint.Tracker.Recorded).
	Recorded(at pglogrepl.LSN)
	Pending() bool
}

// Budget bounds the events handed on and not yet done (INV-6,
// checkpoint.Budget): while Full the stream stops reading WAL and keeps
// sending status updates.
type Budget interface {
	Full() bool
	Freed() <-chan struct{}
	InFlight() (events int, bytes int64)
	// WaitDrained blocks until no event is in flight, or returns
	// ctx.Err() when ctx ends first.
	WaitDrained(ctx context.Context) error
}

// Pause is the isolator's hold on reading (checkpoint.Pause): while On
// the stream reads nothing and keeps sending status updates.
type Pause interface {
	On() bool
	Resumed() <-chan struct{}
}

// Flow is what the stream reports to and waits for. Budget must be the one
// the Frontier's events count against (checkpoint.New): the stream pauses
// on it and, at a stop, waits on it for the events in flight. A nil Budget
// bounds nothing and waits for nothing at a stop (what is in flight is
// sent again by the next session); a nil Pause never pauses.
type Flow struct {
	Frontier Frontier
	Budget   Budget
	Pause    Pause
}

type unbounded struct{}

func (unbounded) Full() bool                        { return false }
func (unbounded) Freed() <-chan struct{}            { return nil }
func (unbounded) InFlight() (int, int64)            { return 0, 0 }
func (unbounded) WaitDrained(context.Context) error { return nil }
func (unbounded) On() bool                          { return false }
func (unbounded) Resumed() <-chan struct{}          { return nil }
func (f *Flow) defaults() {
	if f.Budget == nil {
		f.Budget = unbounded{}
	}
	if f.Pause == nil {
		f.Pause = unbounded{}
	}
}

// blocked reports whether the stream must stop reading WAL.
func (s *Stream) blocked() bool { return s.budget.Full() || s.pause.On() }

// waitUnblocked waits until the stream may read again or ctx ends.
func (s *Stream) waitUnblocked(ctx context.Context) {
	for s.blocked() {
		select {
		case <-s.budget.Freed():
		case <-s.pause.Resumed():
		case <-ctx.Done():
			return
		}
	}
}
