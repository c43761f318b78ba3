package forwarder

import (
	"testing"
	"time"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/replication/replicationtest"
)

// Session rules proven in-process: a whole Forwarder (Run) against the
// fake walsender of replicationtest, with a scripted sink or kfake
// (harness_test.go). Each test names the invariant it guards.

// TestSessionConfirmsNeverPastUnackedEvent (INV-1): the position confirmed
// to the walsender never passes an event the sink has not acknowledged,
// even when a later event is acknowledged first and a keepalive reports
// the WAL's end; it moves to the end of both once the first is
// acknowledged too.
func TestSessionConfirmsNeverPastUnackedEvent(t *testing.T) {
	h := newSessionHarness(t, replicationtest.Config{}, nil)
	s := newHeldSink()
	h.run(Deps{Sink: s})
	start := h.pg.Slot().Confirmed
	first := h.pg.Append(row(1))
	second := h.pg.Append(row(2))
	s.waitProduced(h.ctx, t, 2)

	s.ack(t, "k2")
	// The acknowledgement reached the tracker: one event left in flight.
	if err := h.pg.Wait(h.ctx, "the tracker to see the second event acknowledged", func() bool {
		tr := h.f.m.tracker.Load()
		n, _ := tr.InFlight()
		return n == 1
	}); err != nil {
		t.Fatal(err)
	}
	// A keepalive at the WAL's end asks for a status update, after the
	// acknowledgement.
	n := len(h.pg.Statuses())
	h.pg.Keepalive(true)
	if err := h.pg.Wait(h.ctx, "a status update answering the keepalive", func() bool { return len(h.pg.Statuses()) > n }); err != nil {
		t.Fatal(err)
	}
	for _, st := range h.pg.Statuses() {
		if st.Flush > start {
			t.Fatalf("confirmed %s with the first event (transaction ending %s) unacknowledged: want nothing past the slot's %s (the second event, acknowledged, ends %s)",
				st.Flush, first.End, start, second.End)
		}
	}

	s.ack(t, "k1")
	h.waitFlush(second.End)
}

// TestSessionStopWithinDeadline (kafka.flush_timeout): a stop with events
// the sink never acknowledges ends Run within the flush timeout (plus the
// final status update and position write it allows), confirming nothing
// past them to the walsender or in walpost_position.
func TestSessionStopWithinDeadline(t *testing.T) {
	const flushTimeout = 500 * time.Millisecond
	h := newSessionHarness(t, replicationtest.Config{}, func(cfg *config.Config) { cfg.Kafka.FlushTimeout = flushTimeout })
	s := newHeldSink()
	h.run(Deps{Sink: s})
	start := h.pg.Slot().Confirmed
	acked := h.pg.Append(row(1))
	s.waitProduced(h.ctx, t, 1)
	s.ack(t, "k1")
	h.waitFlush(acked.End)
	h.pg.Append(row(2))
	s.waitProduced(h.ctx, t, 2)

	stopped := time.Now()
	h.stop()
	if err := h.result(); err != nil {
		t.Fatalf("Run after a stop: %v, want nil", err)
	}
	// The drain and the final flush end by the flush timeout; the final
	// status update and position write are quick on a live server.
	if took := time.Since(stopped); took > flushTimeout+2*time.Second {
		t.Fatalf("Run returned %s after the stop, want within the flush timeout %s (+2s)", took.Round(time.Millisecond), flushTimeout)
	}
	if got := h.pg.MaxFlush(); got != acked.End {
		t.Errorf("confirmed %s to the walsender, want %s: the end of the acknowledged transaction, not past the unacknowledged one (slot started at %s)", got, acked.End, start)
	}
	if p := h.db.position(); p == nil || p.LSN != acked.End {
		t.Errorf("walpost_position %+v, want LSN %s", p, acked.End)
	}
}
