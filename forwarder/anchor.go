package forwarder

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/sink/kafka"
)

// Reasons of walpost_checkpoint_refused_total.
const (
	refusedWentBack = "went_back"
	refusedAhead    = "ahead_of_server"
	refusedNotInWAL = "not_in_wal"
)

// errCheckpointMismatch: the WAL the session reads does not hold the
// transactions the exactly-once checkpoint names (the server was restored
// to an earlier point of the same timeline, or walpost recover reset the
// position below it). The session ends with nothing confirmed past
// walpost_position; the next one does not use that checkpoint.
var errCheckpointMismatch = errors.New("the exactly-once checkpoint does not match the server's WAL")

// anchorCheck verifies, while the skipper reads the WAL, what a checkpoint
// claims past hold, the position PostgreSQL itself recorded (the slot and
// walpost_position): that the last transaction with events at or before
// its LSN is its anchor (commit LSN and commit time), with no other
// transaction with events between the anchor and the LSN, and that the
// partial transaction has the commit time it names. Until the claim is
// verified the tracker is held at hold, so a skip on a false claim is
// never confirmed: a mismatch ends the session (INV-1, INV-11; DESIGN.md,
// "Exactly-once delivery").
type anchorCheck struct {
	cp   kafka.TxnMark
	hold pglogrepl.LSN // what PostgreSQL recorded; the tracker is held there
	// tracker.Started is where the stream started: past the slot's
	// position read at the session's start when another walpost confirmed
	// the slot in between (a takeover); the stream then starts after
	// transactions the check cannot see and the slot vouches for.
	tracker *checkpoint.Tracker
	log     *slog.Logger
	slot    string
	// refute ends the session with the mismatch and remembers the
	// checkpoint as refuted.
	refute func(reason string, err error)

	anchorSeen bool
	verified   bool
	refuted    bool
}

// event checks one event before the skipper decides on it; pseen is the
// number of events of the partial transaction seen so far. false: the
// claim is refuted and the event must be neither skipped nor handed on.
func (c *anchorCheck) event(ev *outbox.Event, pseen int) bool {
	if c.refuted {
		return false
	}
	cp := c.cp
	if cp.PartialCommitLSN != 0 && ev.CommitLSN == cp.PartialCommitLSN && pseen == 0 &&
		!cp.PartialCommitTime.IsZero() && !ev.CommitTime.Equal(cp.PartialCommitTime) {
		c.fail(ev, fmt.Sprintf("the transaction at commit LSN %s committed at %s, the checkpoint's partial transaction at %s",
			ev.CommitLSN, ev.CommitTime.UTC().Format("2006-01-02T15:04:05.000000Z"), cp.PartialCommitTime.UTC().Format("2006-01-02T15:04:05.000000Z")))
		return false
	}
	if c.verified {
		return true
	}
	switch {
	case ev.CommitLSN >= cp.LSN:
		c.past(ev)
	case ev.CommitLSN == cp.AnchorCommitLSN:
		if !ev.CommitTime.Equal(cp.AnchorCommitTime) {
			c.fail(ev, fmt.Sprintf("the transaction at the checkpoint's anchor %s committed at %s, the checkpoint names one committed at %s",
				ev.CommitLSN, ev.CommitTime.UTC().Format("2006-01-02T15:04:05.000000Z"), cp.AnchorCommitTime.UTC().Format("2006-01-02T15:04:05.000000Z")))
			return false
		}
		c.anchorSeen = true
	case ev.CommitLSN > cp.AnchorCommitLSN && ev.CommitLSN >= c.hold:
		c.fail(ev, fmt.Sprintf("a transaction with events at commit LSN %s, between the checkpoint's anchor %s and its position %s, where the checkpoint names none",
			ev.CommitLSN, cp.AnchorCommitLSN, cp.LSN))
		return false
	}
	return !c.refuted
}

// commit checks a transaction's end: one past the checkpoint ends the
// check.
func (c *anchorCheck) commit(end pglogrepl.LSN) {
	if !c.verified && !c.refuted && end > c.cp.LSN {
		c.past(nil)
	}
}

// idle decides once the events handled reach the checkpoint (the last
// transaction it covers was handled, or keepalives moved the watermark
// past it with nothing in flight: Tracker.Idle): on a quiet outbox no
// later event comes to decide it. It runs on the stream's goroutine
// (Observer.Status).
func (c *anchorCheck) idle() {
	if !c.verified && !c.refuted && c.tracker.Handled() >= c.cp.LSN {
		c.past(nil)
	}
}

// past decides when the stream reached past the checkpoint: verified,
// unless the anchor is a transaction the stream must have read (after the
// slot's position) and did not.
func (c *anchorCheck) past(ev *outbox.Event) {
	if c.cp.AnchorCommitLSN > c.tracker.Started() && !c.anchorSeen {
		c.fail(ev, fmt.Sprintf("no transaction at the checkpoint's anchor %s before its position %s", c.cp.AnchorCommitLSN, c.cp.LSN))
		return
	}
	c.verified = true
	c.tracker.Release()
	c.log.Info("exactly-once: the checkpoint matches the server's WAL; transactions up to it are confirmed",
		"slot", c.slot, "checkpoint_lsn", c.cp.LSN.String(), "anchor_commit_lsn", c.cp.AnchorCommitLSN.String(), "anchor_seen", c.anchorSeen)
}

func (c *anchorCheck) fail(ev *outbox.Event, why string) {
	c.refuted = true
	attrs := []any{"slot", c.slot, "checkpoint_lsn", c.cp.LSN.String(), "anchor_commit_lsn", c.cp.AnchorCommitLSN.String(),
		"position_lsn", c.hold.String(), "reason", why}
	if ev != nil {
		attrs = append(attrs, "idempotency_key", ev.IdempotencyKey, "commit_lsn", ev.CommitLSN.String())
	}
	c.log.Warn("exactly-once: the checkpoint does not match the server's WAL (restored to an earlier point, or walpost recover reset the position): nothing past walpost_position is confirmed, the session restarts without the checkpoint and sends the events after walpost_position again", attrs...)
	c.refute(refusedNotInWAL, fmt.Errorf("%w: checkpoint %s of slot %q: %s", errCheckpointMismatch, c.cp.LSN, c.slot, why))
}
