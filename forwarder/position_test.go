package forwarder

import (
	"log/slog"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/outbox"
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
