package forwarder

import (
	"context"
	"errors"
	"time"
)

// monitorSlot polls the slot's lag, retained WAL and wal_status every
// interval over the side pool until ctx ends.
func (f *Forwarder) monitorSlot(ctx context.Context, every time.Duration) {
	m, slot := f.m, f.cfg.Postgres.Slot
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		var lag, retained *int64
		var status *string
		err := f.pool.QueryRow(ctx, `
			SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint,
			       pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, wal_status
			FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&lag, &retained, &status)
		if err == nil {
			if lag != nil {
				m.lagBytes.Set(float64(*lag))
			}
			if retained != nil {
				m.retained.Set(float64(*retained))
				m.retainedB.Store(*retained)
			}
			if status != nil {
				for _, s := range []string{"reserved", "extended", "unreserved", "lost"} {
					v := 0.0
					if s == *status {
						v = 1
					}
					m.walStatus.WithLabelValues(s).Set(v)
				}
			}
		} else if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			f.log.Debug("slot monitor", "slot", slot, "err", err.Error())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
