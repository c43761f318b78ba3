package forwarder

import (
	"context"
	"sync"
	"time"

	"github.com/walpost/walpost/replication"
)

// stopClock is the one deadline of a clean stop, kafka.flush_timeout after
// walpost's context ended: the stream's drain (reading to the open
// transaction's commit, waiting for in-flight events), the isolator's
// settling and the final flush of the sink all end by it, so a stop
// drains within kafka.flush_timeout in total. Only the final status
// update (≤ 5 s) and the last position write (≤ 5 s) come after it.
type stopClock struct {
	ctx     context.Context
	timeout time.Duration
	once    sync.Once
	at      time.Time
	release func() bool
}

// newStopClock starts the clock when ctx ends; release stops watching ctx.
func newStopClock(ctx context.Context, timeout time.Duration) *stopClock {
	c := &stopClock{ctx: ctx, timeout: timeout}
	c.release = context.AfterFunc(ctx, func() { c.deadline() })
	return c
}

// deadline is when the stop must be done: fixed by the first call after
// ctx ended, which the end of ctx makes at once. Before ctx ended (a
// session aborted by a failure drains nothing, but may ask) it is timeout
// from now, and fixes nothing.
func (c *stopClock) deadline() time.Time {
	if c.ctx.Err() == nil {
		return time.Now().Add(c.timeout)
	}
	c.once.Do(func() { c.at = time.Now().Add(c.timeout) })
	return c.at
}

// isolatorContext is the context the isolator runs on in a session whose
// goroutines run on gctx. It outlives a clean stop: a refused record being
// settled when gctx ends is finished (retried, or quarantined, and the
// events held behind it released), so the stream's drain confirms its
// transaction and a restart sends nothing twice. It ends
//   - at once when gctx ends with a failure (replication.Aborted: another
//     goroutine of the session failed), as before;
//   - at the stop's deadline;
//   - when done is called: the session calls it once the stream has
//     returned, after its final status update, when nothing the isolator
//     still settles could be confirmed in this session.
func isolatorContext(gctx context.Context, stop *stopClock) (ctx context.Context, done func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(gctx))
	var mu sync.Mutex
	var timer *time.Timer
	unwatch := context.AfterFunc(gctx, func() {
		if replication.Aborted(gctx) {
			cancel()
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if ctx.Err() == nil {
			timer = time.AfterFunc(time.Until(stop.deadline()), cancel)
		}
	})
	return ctx, func() {
		unwatch()
		cancel()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
	}
}
