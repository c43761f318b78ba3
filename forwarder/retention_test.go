package forwarder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/leak"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/prune"
)

// counterValue reads a counter.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestPruneOutboxCountsAndGoesOn: the loop runs a pass every interval;
// rows deleted are counted (also those of a pass that failed part way), a
// failed pass is counted and logged with the key and does not end the
// loop, the waits of a walpost with nothing confirmed yet are neither, and
// the loop returns when its context ends without leaving a goroutine.
func TestPruneOutboxCountsAndGoesOn(t *testing.T) {
	defer leak.VerifyNone(t, goleak.IgnoreCurrent())
	var logs lockedBuffer
	f := &watchers{cfg: config.Default(), log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), m: newMetrics(nil), ident: new(atomic.Pointer[position.Identity])}
	refused := fmt.Errorf("wrapped: %w", errors.New("permission denied for table outbox (SQLSTATE 42501)"))
	results := []struct {
		rep *prune.Report
		err error
	}{
		{nil, errNoSession},
		{&prune.Report{}, fmt.Errorf("%w", prune.ErrNothingConfirmed)},
		{&prune.Report{Deleted: 5}, nil},
		{&prune.Report{Deleted: 2}, fmt.Errorf("delete a batch (after 2 rows): %w", refused)},
		{&prune.Report{}, refused},
		{&prune.Report{Deleted: 3}, nil},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := make(chan int, len(results))
	n := 0
	pass := func(context.Context) (*prune.Report, error) {
		if n == len(results) {
			cancel() // the last pass: stop the loop
			<-ctx.Done()
			return nil, ctx.Err()
		}
		r := results[n]
		n++
		calls <- n
		return r.rep, r.err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.pruneOutbox(ctx, time.Millisecond, pass)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the prune loop did not return after its context ended")
	}
	if len(calls) != len(results) {
		t.Fatalf("%d passes ran, want %d: a failed pass must not end the loop", len(calls), len(results))
	}
	if got := counterValue(t, f.m.pruned); got != 10 {
		t.Errorf("walpost_outbox_pruned_rows_total = %v, want 10 (5 + 2 of the failed pass + 3)", got)
	}
	if got := counterValue(t, f.m.pruneErrors); got != 2 {
		t.Errorf("walpost_outbox_prune_errors_total = %v, want 2 (the waits are not errors, the stop is not one)", got)
	}
	out := logs.String()
	if c := strings.Count(out, `level=WARN msg="outbox prune failed; forwarding goes on and the next pass tries again" key=outbox.retention`); c != 2 {
		t.Errorf("%d warnings naming outbox.retention, want 2:\n%s", c, out)
	}
	if !strings.Contains(out, "deleted=2") || !strings.Contains(out, "SQLSTATE 42501") {
		t.Errorf("the warning lacks the rows deleted before the failure or the error:\n%s", out)
	}
	if c := strings.Count(out, `level=DEBUG msg="outbox prune waits"`); c != 2 {
		t.Errorf("%d debug lines for the waits, want 2:\n%s", c, out)
	}
}

// TestPrunePassWaitsForASession: before a session checked the position
// (the first one, or standing by for a slot another process holds) a pass
// deletes nothing and says so.
func TestPrunePassWaitsForASession(t *testing.T) {
	f := &watchers{cfg: config.Default(), log: slog.New(slog.DiscardHandler), m: newMetrics(nil), ident: new(atomic.Pointer[position.Identity])}
	rep, err := f.prunePass(context.Background())
	if !errors.Is(err, errNoSession) || rep != nil {
		t.Fatalf("pass without a session: %v, %v; want errNoSession", rep, err)
	}
}
