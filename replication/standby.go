package replication

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
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

// ReadStandbySlots connects to each host of connString that is a
// standby (pg_is_in_recovery) and reads the state of its copy of slot;
// hosts that are primaries are skipped, hosts that cannot be reached are
// reported unreachable. With syncNow, a standby whose copy is not synced
// yet is asked to synchronise at once (pg_sync_replication_slots(), which
// PostgreSQL 17 allows beside its slot sync worker; a refusal is
// ignored: the worker syncs within its nap of up to 30 s). A URL with one
// host has no standbys to read: nil.
func ReadStandbySlots(ctx context.Context, connString, slot string, syncNow bool) ([]StandbySlot, error) {
	base, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	if len(base.Fallbacks) == 0 {
		return nil, nil
	}
	type hostPort struct {
		host string
		port uint16
	}
	hosts := []hostPort{{base.Host, base.Port}}
	seen := map[hostPort]bool{hosts[0]: true}
	for _, fb := range base.Fallbacks {
		hp := hostPort{fb.Host, fb.Port}
		if !seen[hp] {
			seen[hp] = true
			hosts = append(hosts, hp)
		}
	}
	var out []StandbySlot
	for _, hp := range hosts {
		cfg := base.Copy()
		cfg.Host, cfg.Port, cfg.Fallbacks = hp.host, hp.port, nil
		cfg.ValidateConnect = nil // target_session_attrs: here, any server
		if cfg.ConnectTimeout == 0 || cfg.ConnectTimeout > 5*time.Second {
			cfg.ConnectTimeout = 5 * time.Second
		}
		ownSession(cfg.RuntimeParams)
		name := net.JoinHostPort(hp.host, strconv.Itoa(int(hp.port)))
		s, standby := readStandbySlot(ctx, cfg, slot, syncNow)
		if !standby {
			continue
		}
		s.Standby = name
		out = append(out, s)
	}
	return out, nil
}

// readStandbySlot reads the copy of slot on the server of cfg; standby is
// false when the server is a primary.
func readStandbySlot(ctx context.Context, cfg *pgx.ConnConfig, slot string, syncNow bool) (s StandbySlot, standby bool) {
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
	s = readCopy(ctx, conn, slot)
	if syncNow && !s.Protected() && s.State != "unreachable" {
		if _, err := conn.Exec(ctx, `SELECT pg_sync_replication_slots()`); err == nil {
			s = readCopy(ctx, conn, slot)
		}
	}
	return s, true
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
