package forwarder

import (
	"context"
	"errors"
	"time"

	"github.com/walpost/walpost/replication"
)

// monitorSlot polls the slot's lag, retained WAL and wal_status every
// interval over the side pool (replication.QuerySlot, which also measures
// from the right position on a standby) until ctx ends.
func (w *watchers) monitorSlot(ctx context.Context, every time.Duration) {
	m, slot := w.m, w.cfg.Postgres.Slot
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		// !ok with a nil error: the slot does not exist yet (the first
		// session creates it); nothing to report.
		row, ok, err := replication.QuerySlot(ctx, w.pool, slot)
		lag := int64(-1) // not measured: no progress estimate from a stale lag
		if err == nil && ok {
			if row.LagBytes != nil {
				m.lagBytes.Set(float64(*row.LagBytes))
				lag = *row.LagBytes
			}
			if row.RetainedWALBytes != nil {
				m.retained.Set(float64(*row.RetainedWALBytes))
				m.retainedB.Store(*row.RetainedWALBytes)
			}
			if row.WALStatus != nil {
				for _, s := range []string{"reserved", "extended", "unreserved", "lost"} {
					v := 0.0
					if s == *row.WALStatus {
						v = 1
					}
					m.walStatus.WithLabelValues(s).Set(v)
				}
			}
		}
		m.lagB.Store(lag)
		if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			w.log.Debug("slot monitor", "slot", slot, "err", err.Error())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
