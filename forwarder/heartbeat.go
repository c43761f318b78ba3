package forwarder

import (
	"context"
	"time"

	"github.com/walpost/walpost/internal/redact"
)

// heartbeat emits a non-transactional logical message every interval
// (postgres.heartbeat_interval) over the side pool, so the slot advances
// even on a database without writes; it returns when ctx ends.
func (w *watchers) heartbeat(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := w.pool.Exec(ctx, `SELECT pg_logical_emit_message(false, 'walpost-heartbeat', '')`); err != nil && ctx.Err() == nil {
			w.log.Warn("heartbeat failed", "err", redact.String(err.Error()))
		}
	}
}
