package replication

import (
	"testing"
	"time"

	"github.com/walpost/walpost/checkpoint"
)

// TestNextWakeUnsentWatermark: when the last events were acknowledged
// and nothing is pending, a watermark not yet sent still wakes the loop
// within statusTick of the last status update, not at the status interval.
func TestNextWakeUnsentWatermark(t *testing.T) {
	tr := checkpoint.New(100, nil)
	s := &Stream{tracker: tr, sent: 100}
	now := time.Now()
	s.lastSent = now.Add(-50 * time.Millisecond)
	nextStatus := now.Add(10 * time.Second)

	if got := s.nextWake(now, nextStatus); !got.Equal(nextStatus) {
		t.Fatalf("idle: wake %s, want the status interval", got.Sub(now))
	}

	x, err := tr.OpenAt(time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	k := tr.Add(x, 10)
	if err := tr.Seal(x, 200); err != nil {
		t.Fatal(err)
	}
	if got := s.nextWake(now, nextStatus); got.Sub(now) > statusTick {
		t.Fatalf("events pending: wake in %s, want ≤ %s", got.Sub(now), statusTick)
	}

	tr.Done(k)
	if tr.Pending() || tr.Confirmed() != 200 {
		t.Fatalf("pending %v, confirmed %s", tr.Pending(), tr.Confirmed())
	}
	want := s.lastSent.Add(statusTick)
	if got := s.nextWake(now, nextStatus); !got.Equal(want) {
		t.Fatalf("acknowledged but unsent watermark: wake in %s, want %s (lastSent + statusTick)", got.Sub(now), want.Sub(now))
	}

	s.sent = 200
	if got := s.nextWake(now, nextStatus); !got.Equal(nextStatus) {
		t.Fatalf("watermark sent: wake in %s, want the status interval", got.Sub(now))
	}
}
