package forwarder

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"
)

// TestProgressLines: with a backlog above the threshold and events flowing,
// each tick logs one "catching up" line with the interval's events per
// second, the lag and the time to drain it at the interval's rate; below
// the threshold one "caught up" line, then silence; a backlog that neither
// flows nor shrinks logs nothing.
func TestProgressLines(t *testing.T) {
	var buf bytes.Buffer
	m := newMetrics(nil)
	p := newProgress(slog.New(slog.NewJSONHandler(&buf, nil)), m, "walpost_slot")
	p.threshold = 1000
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	lines := func() []map[string]any {
		t.Helper()
		var out []map[string]any
		dec := json.NewDecoder(&buf)
		for dec.More() {
			var l map[string]any
			if err := dec.Decode(&l); err != nil {
				t.Fatal(err)
			}
			out = append(out, l)
		}
		buf.Reset()
		return out
	}
	step := func(i int, sent uint64, lag int64) []map[string]any {
		t.Helper()
		m.producedN.Add(sent)
		m.receivedN.Add(sent)
		m.lagB.Store(lag)
		p.tick(t0.Add(time.Duration(i) * 10 * time.Second))
		return lines()
	}

	if l := step(0, 0, 100_000); len(l) != 0 {
		t.Fatalf("the first tick only takes the baseline, got %v", l)
	}
	l := step(1, 500, 80_000) // 50 events/s, 2000 B/s of lag drained: 40 s left
	if len(l) != 1 {
		t.Fatalf("want one line, got %v", l)
	}
	want := map[string]any{"msg": "catching up", "slot": "walpost_slot", "events_sent": 500.0, "interval": "10s",
		"events_per_second": 50.0, "lag_bytes": 80000.0, "eta": "40s"}
	for k, v := range want {
		if l[0][k] != v {
			t.Errorf("%s = %v, want %v (line %v)", k, l[0][k], v, l[0])
		}
	}
	// Events flow but the lag grows (the server writes faster): logged
	// without an estimate.
	if l := step(2, 100, 90_000); len(l) != 1 || l[0]["eta"] != "unknown" || l[0]["events_per_second"] != 10.0 {
		t.Fatalf("growing lag: %v", l)
	}
	// Nothing flows, the lag stays: not draining, nothing logged.
	if l := step(3, 0, 90_000); len(l) != 0 {
		t.Fatalf("stalled backlog logged %v", l)
	}
	// Lag not measured: nothing logged.
	if l := step(4, 100, -1); len(l) != 0 {
		t.Fatalf("unmeasured lag logged %v", l)
	}
	if l := step(5, 100, 50_000); len(l) != 1 || l[0]["msg"] != "catching up" {
		t.Fatalf("draining again: %v", l)
	}
	if l := step(6, 100, 500); len(l) != 1 || l[0]["msg"] != "caught up" || l[0]["lag_bytes"] != 500.0 {
		t.Fatalf("want one caught-up line, got %v", l)
	}
	if l := step(7, 100, 400); len(l) != 0 {
		t.Fatalf("a caught-up forwarder logged %v", l)
	}
}

// TestProgressCounters: the counters progress reads follow the events the
// metrics record (received, acknowledged).
func TestProgressCounters(t *testing.T) {
	m := newMetrics(nil)
	if m.lagB.Load() != -1 {
		t.Fatalf("lag before any measurement = %d, want -1", m.lagB.Load())
	}
	m.onReceived(nil)
	m.onReceived(nil)
	ack := m.onAck("t")
	ack("t", time.Time{}, time.Millisecond, time.Now())
	ack("other", time.Time{}, time.Millisecond, time.Now())
	ack("", time.Time{}, time.Millisecond, time.Now())
	if r, p := m.receivedN.Load(), m.producedN.Load(); r != 2 || p != 3 {
		t.Fatalf("received %d produced %d, want 2 and 3", r, p)
	}
}
