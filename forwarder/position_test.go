package forwarder

import (
	"log/slog"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/replication"
)

// TestSkipperSkipsConfirmedTransactions: a session that starts behind the
// stored position 0/300 marks the events of transactions ending at or
// before it done without handing them on, the watermark moves over them,
// and everything after goes to the next handler.
func TestSkipperSkipsConfirmedTransactions(t *testing.T) {
	tr := checkpoint.New(0x100, checkpoint.Limits{})
	var passed []string
	var commits []pglogrepl.LSN
	next := replication.HandlerFuncs{
		EmitFunc:   func(ev *outbox.Event, _ checkpoint.Ticket) { passed = append(passed, ev.IdempotencyKey) },
		CommitFunc: func(end pglogrepl.LSN) { commits = append(commits, end) },
	}
	skipped := prometheus.NewCounter(prometheus.CounterOpts{Name: "skipped"})
	s := &skipper{next: next, tracker: tr, upTo: 0x300, skipped: skipped, log: slog.New(slog.DiscardHandler), slot: "s", from: 0x100}
	// Transactions as (commit LSN, end LSN, events); the stored position
	// 0/300 is the end of the second.
	txns := []struct {
		commit, end pglogrepl.LSN
		keys        []string
	}{
		{0x1d0, 0x200, []string{"a1", "a2"}},
		{0x2d0, 0x300, []string{"b1"}},
		{0x3d0, 0x400, []string{"c1", "c2"}},
	}
	for _, x := range txns {
		txn, err := tr.Open()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range x.keys {
			s.Emit(&outbox.Event{IdempotencyKey: k, CommitLSN: x.commit}, tr.Add(txn, 1))
		}
		s.Commit(x.end)
		if err := tr.Seal(txn, x.end); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"c1", "c2"}; len(passed) != 2 || passed[0] != want[0] || passed[1] != want[1] {
		t.Errorf("handed on %v, want %v", passed, want)
	}
	if len(commits) != 3 {
		t.Errorf("commits handed on %v, want all three", commits)
	}
	var m dto.Metric
	if err := skipped.Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 3 {
		t.Errorf("skipped counter %v, want 3", got)
	}
	if got := tr.Confirmed(); got != 0x300 {
		t.Errorf("watermark %s, want 0/300 (the skipped transactions confirmed, the third one pending)", got)
	}
	if !s.over || s.n != 3 || s.first != 0x1d0 || s.last != 0x2d0 {
		t.Errorf("skipper state over=%v n=%d first=%s last=%s", s.over, s.n, s.first, s.last)
	}
}

// TestHandlerForAcrossTimelines: a session on another timeline than the
// stored position skips up to the plan's SkipTo (at most the switch point,
// position.AcrossSwitch) and counts the timeline change; with nothing to
// skip the isolator handles every event.
func TestHandlerForAcrossTimelines(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := &Forwarder{cfg: &config.Config{}, log: slog.New(slog.DiscardHandler), m: newMetrics(reg)}
	f.cfg.Postgres.Slot = "s"
	tr := checkpoint.New(0x100, checkpoint.Limits{})
	iso := &Isolator{}
	id := position.Identity{SystemID: 1, Timeline: 3}
	row := position.Row{Slot: "s", Identity: position.Identity{SystemID: 1, Timeline: 2}, LSN: 0x900}
	slot := replication.SlotInfo{Exists: true, ConfirmedFlush: 0x100}

	h, skip := f.handlerFor(position.Plan{TimelineChanged: true, SwitchPoint: 0x500, SkipTo: 0x500}, id, row, slot, iso, tr)
	if skip == nil || skip.upTo != 0x500 || h != replication.Handler(skip) {
		t.Fatalf("handler %T, skipper %+v: want a skipper up to the switch point 0/500", h, skip)
	}
	h, skip = f.handlerFor(position.Plan{TimelineChanged: true}, id, row, slot, iso, tr)
	if skip != nil || h != replication.Handler(iso) {
		t.Errorf("handler %T, skipper %v: want the isolator when the history gives nothing to skip", h, skip)
	}
	var m dto.Metric
	if err := f.m.timelineChanged.Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 2 {
		t.Errorf("walpost_position_timeline_changed_total = %v, want 2", got)
	}
}
