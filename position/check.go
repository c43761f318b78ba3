package position

import (
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
)

// Slot is what Check needs to know of the replication slot.
type Slot struct {
	Name   string
	Exists bool
	Lost   bool // invalidated: wal_status = 'lost', or an invalidation_reason (PostgreSQL 17+)
	// LostWhy says why Lost, naming the setting (replication.InvalidationText);
	// empty: max_slot_wal_keep_size.
	LostWhy   string
	Confirmed pglogrepl.LSN // confirmed_flush_lsn
}

// Plan is what a session does with the stored position.
type Plan struct {
	// SkipTo, when above 0, is the stored LSN the slot is behind: the
	// transactions that end at or before it were confirmed before and are
	// skipped (INV-7).
	SkipTo pglogrepl.LSN
	// TimelineChanged: the row was recorded on another timeline of this
	// cluster. Check then skips nothing; AcrossSwitch sets SkipTo to at
	// most the switch point.
	TimelineChanged bool
	// SwitchPoint, with TimelineChanged, is where the server's timeline
	// history leaves the row's timeline (AcrossSwitch); 0 when unknown or
	// when the row's timeline is not an ancestor.
	SwitchPoint pglogrepl.LSN
}

// Check decides whether a session may start: row (found: it exists) is the
// stored position, id the server's identity, slot the slot before any is
// created. Only with no row may a missing slot be created.
func Check(row Row, found bool, id Identity, slot Slot) (Plan, error) {
	if !found {
		return Plan{}, nil
	}
	if !row.RecoveringSince.IsZero() {
		return Plan{}, fmt.Errorf("%w: a walpost recover of slot %q started at %s and did not finish (%s): the slot it created may be past outbox rows not yet in Kafka, so walpost run does not stream from it. Fix: run walpost recover again (README, Runbook, \"Slot lost\")",
			ErrGap, slot.Name, row.RecoveringSince.UTC().Format(time.RFC3339), row.Last())
	}
	if row.SystemID != id.SystemID {
		return Plan{}, fmt.Errorf("%w: postgres.url reaches %s, but walpost's position for slot %q was recorded on system identifier %d (%s): a restored backup, pg_upgrade or the wrong server; LSNs of two clusters are unrelated, so walpost creates and confirms nothing. Fix: if this is the wrong server, correct postgres.url; if the database moved here, %s",
			ErrOtherSystem, id, slot.Name, row.SystemID, row.Last(), recoverHint(slot.Name, row))
	}
	if !slot.Exists || slot.Lost {
		state := "does not exist"
		if slot.Lost {
			state = slot.LostWhy
			if state == "" {
				state = "was invalidated (wal_status = lost, max_slot_wal_keep_size exceeded)"
			}
		}
		return Plan{}, fmt.Errorf("%w: slot %q %s, but walpost had confirmed up to %s on it: events committed after %s may never reach Kafka, and walpost does not re-create the slot over the gap. Fix: %s",
			ErrGap, slot.Name, state, row.Last(), since(row), recoverHint(slot.Name, row))
	}
	if row.Timeline != id.Timeline {
		return Plan{TimelineChanged: true}, nil
	}
	if row.LSN > slot.Confirmed {
		return Plan{SkipTo: row.LSN}, nil
	}
	return Plan{}, nil
}

func since(r Row) string {
	if r.LastCommit.IsZero() {
		return "LSN " + r.LSN.String()
	}
	return r.LastCommit.UTC().Format(time.RFC3339Nano)
}

// recoverHint is the fix for a gap.
func recoverHint(slot string, r Row) string {
	return fmt.Sprintf("run walpost recover (walpost recover --dry-run prints its plan first; README, Runbook, \"Slot lost\"): "+
		"it creates slot %q with an exported snapshot and produces the outbox rows committed after %s from it, then records the new position",
		slot, since(r))
}
