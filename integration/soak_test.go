package integration

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestSoak runs nemesis rounds back to back until the test's deadline
// (go test -timeout 0 has none) or SIGINT/SIGTERM, printing a running tally
// after every round. Skipped unless WALPOST_SOAK=1 (make soak).
// WALPOST_SOAK_SEED sets the first round's seed (default: the clock; each
// round uses the next seed), WALPOST_NEMESIS_DURATION the fault phase of a
// round (default 90s). A failed round is reported and the soak goes on.
func TestSoak(t *testing.T) {
	if os.Getenv("WALPOST_SOAK") != "1" {
		t.Skip("soak test: set WALPOST_SOAK=1 (make soak)")
	}
	needStack(t)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // a second signal ends the process at once
	}()
	// Leave time to heal, drain and validate the last round.
	const finishing = 4 * time.Minute
	if dl, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-finishing))
		defer cancel()
	}
	seed := uint64(time.Now().UnixNano() % 1_000_000)
	if s := os.Getenv("WALPOST_SOAK_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("WALPOST_SOAK_SEED=%q: %v", s, err)
		}
		seed = n
	}
	dur := 90 * time.Second
	if os.Getenv("WALPOST_NEMESIS_DURATION") != "" {
		dur = nemesisDuration(t)
	}
	started := time.Now()
	var total nemesisTally
	failed := 0
	for round := 1; ctx.Err() == nil; round++ {
		s := seed + uint64(round-1)
		ok := t.Run(fmt.Sprintf("round=%d/seed=%d", round, s), func(t *testing.T) {
			t.Logf("nemesis seed %d", s)
			total.add(nemesisRound(ctx, t, s, math.MaxInt, dur)) // a soak round is bounded by its duration
		})
		if !ok {
			failed++
		}
		// With -v, t.Logf is streamed as it happens.
		t.Logf("soak after %s: %s; failed rounds %d", time.Since(started).Round(time.Second), total, failed)
	}
	t.Logf("soak stopped (%v) after %s", context.Cause(ctx), time.Since(started).Round(time.Second))
}
