package forwarder

import (
	"context"
	"strings"
	"time"

	"github.com/walpost/walpost/replication"
)

// monitorStandbys follows the slot's copies on the standbys postgres.url
// lists (PostgreSQL 17+ failover slots): walpost_slot_standby_synced per
// standby, and /readyz's detail while a failover would lose the slot.
// It reads them after fast, then backs off (doubling) up to most while a
// copy is missing, and every slow once each is synced. A URL with one
// host, or whose standbys all predate failover slots, has nothing to
// follow.
func (w *watchers) monitorStandbys(ctx context.Context, fast, most, slow time.Duration) {
	url, slot := w.cfg.Postgres.URL, w.cfg.Postgres.Slot
	protected, logged := false, false
	wait := fast
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		standbys, err := replication.ReadStandbySlots(rctx, url, slot)
		cancel()
		if ctx.Err() != nil {
			return
		}
		var not []string
		supported := 0
		for _, s := range standbys {
			if s.State == "unsupported" {
				continue
			}
			supported++
			v := 0.0
			if s.Protected() {
				v = 1
			} else {
				not = append(not, s.Detail())
			}
			w.m.standbySync.WithLabelValues(s.Standby).Set(v)
		}
		if err != nil || supported == 0 {
			w.m.unprotected.Store(nil)
			return // one host, standbys before PostgreSQL 17, or a URL refused elsewhere
		}
		was := protected
		protected = len(not) == 0
		if protected {
			w.m.unprotected.Store(nil)
			wait = slow
			if !was {
				w.log.Info("failover protected: every standby of postgres.url has a synced copy of the slot", "slot", slot, "standbys", supported)
			}
			continue
		}
		why := "failover not yet protected: " + strings.Join(not, "; ")
		w.m.unprotected.Store(&why)
		if !logged || was {
			w.log.Warn("failover not yet protected: a promotion now would lose the slot and need walpost recover", "slot", slot, "detail", strings.Join(not, "; "))
			logged = true
		}
		if was {
			wait = fast
		}
		wait = min(2*wait, most)
	}
}
