package replication

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// StandbySlot is the state of the slot's copy on one physical standby
// that postgres.url lists (a multi-host URL: the primary and its
// standbys, as for target_session_attrs=read-write). A failover loses
// nothing only once every such standby has a synced, persistent copy:
// PostgreSQL 17's slot sync first creates the copy temporary, until the
// primary's slot has moved past what the standby had, and drops a
// temporary copy at promotion.
type StandbySlot struct {
	Standby string // host:port as the URL lists it
	// State: synced (the copy survives a promotion), temporary (being
	// synced: not yet), missing, invalidated, unreachable, or
	// unsupported (a standby before PostgreSQL 17: no failover slots).
	State     string
	Confirmed string // the copy's confirmed_flush_lsn, when it has one
	Err       string // why unreachable
}

// Protected reports whether the copy survives a promotion.
func (s StandbySlot) Protected() bool { return s.State == "synced" }

// Detail is s in a sentence.
func (s StandbySlot) Detail() string {
	switch s.State {
	case "synced":
		return fmt.Sprintf("standby %s has a synced copy of the slot (confirmed %s)", s.Standby, s.Confirmed)
	case "temporary":
		return fmt.Sprintf("standby %s is still syncing the slot (a temporary copy, dropped at promotion)", s.Standby)
	case "missing":
		return fmt.Sprintf("standby %s has no copy of the slot yet", s.Standby)
	case "invalidated":
		return fmt.Sprintf("standby %s has an invalidated copy of the slot", s.Standby)
	case "unsupported":
		return fmt.Sprintf("standby %s is older than PostgreSQL 17: it cannot keep a copy of the slot", s.Standby)
	}
	return fmt.Sprintf("standby %s unreachable: %s", s.Standby, s.Err)
}

// ReadStandbySlots connects to each host of connString (all at once)
// and, for each that is a standby (pg_is_in_recovery), reads the state of
// its copy of slot; primaries are skipped, hosts that cannot be reached
// are reported unreachable (a standby down, or a former primary). Each
// host is connected to with its own TLS settings from the URL (sslmode
// prefer or allow fall back per host). It only reads: PostgreSQL's slot
// sync worker makes the copies (pg_sync_replication_slots() is refused
// while that worker runs). A URL with one host has no standbys: nil.
func ReadStandbySlots(ctx context.Context, connString, slot string) ([]StandbySlot, error) {
	base, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	if len(base.Fallbacks) == 0 {
		return nil, nil
	}
	// Each host with its attempts in the URL's order: the first TLS
	// setting, then its fallbacks (prefer: TLS, then plaintext).
	type attempt = pgconn.FallbackConfig
	var order []string
	attempts := map[string][]*attempt{}
	add := func(a *attempt) {
		k := net.JoinHostPort(a.Host, strconv.Itoa(int(a.Port)))
		if _, ok := attempts[k]; !ok {
			order = append(order, k)
		}
		attempts[k] = append(attempts[k], a)
	}
	add(&attempt{Host: base.Host, Port: base.Port, TLSConfig: base.TLSConfig})
	for _, fb := range base.Fallbacks {
		add(fb)
	}
	out := make([]*StandbySlot, len(order))
	var wg sync.WaitGroup
	for i, k := range order {
		as := attempts[k]
		cfg := base.Copy()
		cfg.Host, cfg.Port, cfg.TLSConfig, cfg.Fallbacks = as[0].Host, as[0].Port, as[0].TLSConfig, as[1:]
		cfg.ValidateConnect = nil // target_session_attrs: here, any server
		if cfg.ConnectTimeout == 0 || cfg.ConnectTimeout > 5*time.Second {
			cfg.ConnectTimeout = 5 * time.Second
		}
		ownSession(cfg.RuntimeParams)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if s, standby := readStandbySlot(ctx, cfg, slot); standby {
				s.Standby = k
				out[i] = &s
			}
		}()
	}
	wg.Wait()
	var res []StandbySlot
	for _, s := range out {
		if s != nil {
			res = append(res, *s)
		}
	}
	return res, nil
}

// readStandbySlot reads the copy of slot on the server of cfg; standby is
// false when the server is a primary.
func readStandbySlot(ctx context.Context, cfg *pgx.ConnConfig, slot string) (s StandbySlot, standby bool) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return StandbySlot{State: "unreachable", Err: err.Error()}, true
	}
	defer conn.Close(context.Background())
	var version int
	if err := conn.QueryRow(ctx, `SELECT pg_is_in_recovery(), current_setting('server_version_num')::int`).Scan(&standby, &version); err != nil {
		return StandbySlot{State: "unreachable", Err: err.Error()}, true
	}
	if !standby {
		return StandbySlot{}, false
	}
	if version < FailoverSlotsVersionNum {
		return StandbySlot{State: "unsupported"}, true
	}
	return readCopy(ctx, conn, slot), true
}

// readCopy reads the standby's copy of slot.
func readCopy(ctx context.Context, conn *pgx.Conn, slot string) StandbySlot {
	var synced, temporary bool
	var confirmed, reason *string
	err := conn.QueryRow(ctx, `SELECT synced, temporary, confirmed_flush_lsn::text, invalidation_reason
		FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&synced, &temporary, &confirmed, &reason)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return StandbySlot{State: "missing"}
	case err != nil:
		return StandbySlot{State: "unreachable", Err: err.Error()}
	case reason != nil:
		return StandbySlot{State: "invalidated"}
	case !synced:
		// A slot of the standby's own with the same name: not a copy.
		return StandbySlot{State: "missing"}
	case temporary:
		return StandbySlot{State: "temporary"}
	}
	s := StandbySlot{State: "synced"}
	if confirmed != nil {
		s.Confirmed = *confirmed
	}
	return s
}
