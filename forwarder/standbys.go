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
// Until every standby has a synced copy it reads them every fast and
// asks each to synchronise at once (pg_sync_replication_slots), which
// shortens the window after the slot's creation in which a failover
// loses it from the slot sync worker's nap (up to 30 s) to the time the
// primary's slot takes to move past what the standby had; then every
// slow. A URL with one host has nothing to follow.
func (f *Forwarder) monitorStandbys(ctx context.Context, fast, slow time.Duration) {
	url, slot := f.cfg.Postgres.URL, f.cfg.Postgres.Slot
	protected, logged := false, false
	for {
		wait := fast
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		standbys, err := replication.ReadStandbySlots(rctx, url, slot, !protected)
		cancel()
		if err != nil || len(standbys) == 0 {
			f.m.unprotected.Store(nil)
			return // one host (or a URL pgx cannot parse, refused elsewhere)
		}
		var not []string
		for _, s := range standbys {
			v := 0.0
			if s.Protected() {
				v = 1
			} else {
				not = append(not, s.Detail())
			}
			f.m.standbySync.WithLabelValues(s.Standby).Set(v)
		}
		was := protected
		protected = len(not) == 0
		if protected {
			f.m.unprotected.Store(nil)
			wait = slow
			if !was {
				f.log.Info("failover protected: every standby of postgres.url has a synced copy of the slot", "slot", slot, "standbys", len(standbys))
			}
		} else {
			why := "failover not yet protected: " + strings.Join(not, "; ")
			f.m.unprotected.Store(&why)
			if !logged || was {
				f.log.Warn("failover not yet protected: a promotion now would lose the slot and need walpost recover", "slot", slot, "detail", strings.Join(not, "; "))
				logged = true
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}
