package forwarder

import (
	"context"
	"testing"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/sink"
)

// ackingProducer acknowledges every event at once, as a sink does on
// success.
type ackingProducer struct {
	acked int
}

func (p *ackingProducer) Produce(ev *outbox.Event, a sink.Acker) {
	p.acked++
	a.Acked(sink.Result{Topic: ev.Topic, Partition: 0, Offset: int64(p.acked)}, nil)
}
func (p *ackingProducer) Flush(context.Context) error { return nil }
func (p *ackingProducer) Close()                      {}

type doneTracker struct{ done int }

func (t *doneTracker) Done(checkpoint.Ticket) { t.done++ }
func (t *doneTracker) SetPaused(bool)         {}

// TestIsolatorReusesPending: an acknowledged event's per-event state (its
// callback) is reused for the next event, so
// emitting allocates nothing of the Isolator's own.
func TestIsolatorReusesPending(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops sync.Pool items at random")
	}
	prod, tr := &ackingProducer{}, &doneTracker{}
	iso := newIsolator(isolatorConfig{}, prod, nil, tr)
	ev := &outbox.Event{IdempotencyKey: "k", Payload: []byte(`{}`)}
	iso.Emit(ev, checkpoint.Ticket{}) // warm the pool
	allocs := testing.AllocsPerRun(1000, func() { iso.Emit(ev, checkpoint.Ticket{}) })
	if allocs != 0 {
		t.Fatalf("Emit allocates %.1f objects per acknowledged event, want 0 (the pending state is reused)", allocs)
	}
	if prod.acked != tr.done || tr.done < 1001 {
		t.Fatalf("produced %d, done %d: every acknowledged event must be released once", prod.acked, tr.done)
	}
}
