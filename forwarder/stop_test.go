package forwarder

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sync/errgroup"

	"github.com/walpost/walpost/internal/leak"
)

// TestStopClockOneDeadline: the deadline is taken when the context ends,
// and every later call returns the same one.
func TestStopClockOneDeadline(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c := newStopClock(ctx, time.Hour)
	defer c.release()
	// Asked before the stop (a session that failed), it fixes nothing.
	_ = c.deadline()
	time.Sleep(10 * time.Millisecond)
	before := time.Now()
	cancel()
	first := c.deadline()
	if first.Before(before.Add(time.Hour)) || first.After(time.Now().Add(time.Hour)) {
		t.Fatalf("deadline %s, want an hour after the cancel at %s", first, before)
	}
	time.Sleep(10 * time.Millisecond)
	if again := c.deadline(); !again.Equal(first) {
		t.Fatalf("second deadline %s, want the first %s: a stop has one deadline", again, first)
	}
}

// TestIsolatorContextOutlivesCleanStop: on a plain cancel the isolator's
// context lives on until the stop's deadline, or until done when that
// comes first; a failure of another session goroutine ends it at once.
func TestIsolatorContextOutlivesCleanStop(t *testing.T) {
	defer leak.VerifyNone(t, goleak.IgnoreCurrent())
	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		stop := newStopClock(ctx, 300*time.Millisecond)
		defer stop.release()
		g, gctx := errgroup.WithContext(ctx)
		ictx, done := isolatorContext(gctx, stop)
		defer done()
		g.Go(func() error { <-gctx.Done(); return nil })
		cancel()
		_ = g.Wait()
		select {
		case <-ictx.Done():
			// Ending with the stop itself would be 300 ms early.
			if early := time.Until(stop.deadline()); early > 0 {
				t.Fatalf("the isolator's context ended %s before the stop's deadline, want it to last until then", early)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the isolator's context outlived the stop's deadline")
		}
	})
	t.Run("stream returned", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		stop := newStopClock(ctx, time.Hour)
		defer stop.release()
		_, gctx := errgroup.WithContext(ctx)
		ictx, done := isolatorContext(gctx, stop)
		cancel()
		<-gctx.Done()
		if ictx.Err() != nil {
			t.Fatal("the isolator's context ended with the clean stop")
		}
		done()
		if ictx.Err() == nil {
			t.Fatal("the isolator's context still runs after done (the stream returned)")
		}
	})
	t.Run("another goroutine failed", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stop := newStopClock(ctx, time.Hour)
		defer stop.release()
		g, gctx := errgroup.WithContext(ctx)
		ictx, done := isolatorContext(gctx, stop)
		defer done()
		g.Go(func() error { return errors.New("watcher: server shutting down") })
		_ = g.Wait()
		select {
		case <-ictx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the isolator's context lives on after another goroutine of the session failed")
		}
	})
}
