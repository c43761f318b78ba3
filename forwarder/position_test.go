package forwarder

import (
	"log/slog"
	"testing"
	"time"

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
	tr := checkpoint.New(0x100, nil)
	var passed []string
	var commits []pglogrepl.LSN
	next := replication.HandlerFuncs{
		EmitFunc:   func(ev *outbox.Event, _ checkpoint.Ticket) { passed = append(passed, ev.IdempotencyKey) },
		CommitFunc: func(end pglogrepl.LSN) { commits = append(commits, end) },
	}
	skipped := prometheus.NewCounter(prometheus.CounterOpts{Name: "skipped"})
	s := &skipper{next: next, tracker: tr, upTo: 0x300, skipped: skipped, log: slog.New(slog.DiscardHandler), slot: "s"}
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
		txn, err := tr.OpenAt(time.Time{})
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
	f := &session{cfg: &config.Config{}, log: slog.New(slog.DiscardHandler), m: newMetrics(reg), memory: &memory{}}
	f.cfg.Postgres.Slot = "s"
	tr := checkpoint.New(0x100, nil)
	iso := &isolator{}
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

// TestRaiseToKnown: the position a process confirmed in an earlier session
// raises the stored row only on the same slot and cluster, forward, never
// over a row walpost recover marked, and never when the stored row is
// behind what the process wrote (the database went back in time).
func TestRaiseToKnown(t *testing.T) {
	id := position.Identity{SystemID: 7, Timeline: 1}
	stored := position.Row{Slot: "s", Identity: id, LSN: 0x1000}
	known := position.Row{Slot: "s", Identity: id, LSN: 0x3000}
	marked := stored
	marked.RecoveringSince = time.Unix(1, 0)
	cases := []struct {
		name     string
		row      position.Row
		found    bool
		known    position.Row
		want     pglogrepl.LSN // 0: not raised
		saved    position.Row
		wentBack bool
	}{
		{"written before", stored, true, known, 0x3000, stored, false},
		{"went back", stored, true, known, 0, position.Row{Slot: "s", Identity: id, LSN: 0x2000}, true},
		{"written on the old timeline", position.Row{Slot: "s", Identity: position.Identity{SystemID: 7, Timeline: 2}, LSN: 0x1000}, true,
			position.Row{Slot: "s", Identity: position.Identity{SystemID: 7, Timeline: 2}, LSN: 0x3000}, 0x3000, position.Row{Slot: "s", Identity: id, LSN: 0x2000}, false},
		{"ahead", stored, true, known, 0x3000, position.Row{}, false},
		{"behind", stored, true, position.Row{Slot: "s", Identity: id, LSN: 0x800}, 0, position.Row{}, false},
		{"equal", stored, true, stored, 0, position.Row{}, false},
		{"nothing known", stored, true, position.Row{}, 0, position.Row{}, false},
		{"no stored row", position.Row{}, false, known, 0, position.Row{}, false},
		{"other slot", stored, true, position.Row{Slot: "t", Identity: id, LSN: 0x3000}, 0, position.Row{}, false},
		{"other cluster", stored, true, position.Row{Slot: "s", Identity: position.Identity{SystemID: 8, Timeline: 1}, LSN: 0x3000}, 0, position.Row{}, false},
		{"marked by recover", marked, true, known, 0, position.Row{}, false},
		{"older timeline", position.Row{Slot: "s", Identity: position.Identity{SystemID: 7, Timeline: 2}, LSN: 0x1000}, true, known, 0, position.Row{}, false},
		{"newer timeline", stored, true, position.Row{Slot: "s", Identity: position.Identity{SystemID: 7, Timeline: 2}, LSN: 0x900}, 0x900, position.Row{}, false},
	}
	for _, c := range cases {
		got, ok, wentBack := raiseToKnown(c.row, c.found, c.known, c.saved)
		if wentBack != c.wentBack {
			t.Errorf("%s: went back %v, want %v", c.name, wentBack, c.wentBack)
		}
		if ok != (c.want != 0) {
			t.Errorf("%s: raised %v, want %v", c.name, ok, c.want != 0)
			continue
		}
		if ok && (got.LSN != c.want || got.Identity != c.known.Identity) {
			t.Errorf("%s: raised to %s on %s, want %s on %s", c.name, got.LSN, got.Identity, c.want, c.known.Identity)
		}
		if !ok && got != c.row {
			t.Errorf("%s: row changed to %+v without a raise", c.name, got)
		}
	}
}

// TestRememberKeepsTheHighestPosition: the writer's remember raises the
// forwarder's known position to the tracker's, also after its last write
// (acknowledgements that arrive once the session ended), and never lowers
// it: a new session's tracker starts at the slot, which may be behind.
func TestRememberKeepsTheHighestPosition(t *testing.T) {
	id := position.Identity{SystemID: 7, Timeline: 1}
	var known position.Row
	tr := checkpoint.New(0x100, nil)
	w := &positionWriter{row: position.Row{Slot: "s", Identity: id}, tracker: tr, known: &known}
	w.remember()
	if known.LSN != 0x100 || known.Slot != "s" || known.Identity != id {
		t.Fatalf("known after the first remember: %+v, want 0/100 on slot s", known)
	}
	txn, err := tr.OpenAt(time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	tk := tr.Add(txn, 1)
	if err := tr.Seal(txn, 0x200); err != nil {
		t.Fatal(err)
	}
	w.remember()
	if known.LSN != 0x100 {
		t.Errorf("known moved to %s with the event unacknowledged", known.LSN)
	}
	tr.Done(tk) // the acknowledgement after the session's last write
	w.remember()
	if known.LSN != 0x200 {
		t.Errorf("known %s after the acknowledgement, want 0/200", known.LSN)
	}
	// The next session's tracker starts behind, at the slot.
	w2 := &positionWriter{row: position.Row{Slot: "s", Identity: id}, tracker: checkpoint.New(0x150, nil), known: &known}
	w2.remember()
	if known.LSN != 0x200 {
		t.Errorf("a session starting at 0/150 lowered known to %s", known.LSN)
	}
	// After a promotion the new timeline's position replaces the old one.
	w3 := &positionWriter{row: position.Row{Slot: "s", Identity: position.Identity{SystemID: 7, Timeline: 2}}, tracker: checkpoint.New(0x180, nil), known: &known}
	w3.remember()
	if known.LSN != 0x180 || known.Timeline != 2 {
		t.Errorf("known %s on timeline %d after the promotion, want 0/180 on 2", known.LSN, known.Timeline)
	}
}
