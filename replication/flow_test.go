package replication

import (
	"context"
	"testing"
	"time"

	"github.com/walpost/walpost/checkpoint"
)

// TestStreamWaitsForBudgetAndPause: the stream stops reading while its
// budget is full or the isolator's pause is on, and goes on when the
// event is done and the pause ends.
func TestStreamWaitsForBudgetAndPause(t *testing.T) {
	budget := checkpoint.NewBudget(checkpoint.Limits{MaxEvents: 1})
	pause := checkpoint.NewPause()
	tr := checkpoint.New(0x100, budget)
	s := &Stream{tracker: tr, budget: budget, pause: pause}
	if s.blocked() {
		t.Fatal("blocked with nothing in flight and no pause")
	}
	x, err := tr.OpenAt(time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	k := tr.Add(x, 10)
	if !s.blocked() {
		t.Fatal("not blocked at the budget's limit")
	}
	pause.Set(true)
	done := make(chan struct{})
	go func() { s.waitUnblocked(context.Background()); close(done) }()
	tr.Done(k)
	select {
	case <-done:
		t.Fatal("went on while the pause was on")
	case <-time.After(50 * time.Millisecond):
	}
	pause.Set(false)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting after the event was done and the pause ended")
	}
	if events, _ := budget.InFlight(); events != 0 {
		t.Fatalf("%d events in flight after Done, want 0", events)
	}
}
