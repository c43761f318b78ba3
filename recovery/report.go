package recovery

import (
	"fmt"
	"io"
	"time"
)

func ts(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// Write renders the report as text: the plan, the counts, the time range
// and what cannot be recovered.
func (r *Report) Write(w io.Writer) error {
	pr := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	if r.DryRun {
		pr("dry run: nothing is marked, created or produced")
	}
	pr("slot:              %s (%s)", r.Slot, r.SlotState)
	pr("server:            %s", r.Server)
	if r.HadRow {
		pr("recorded position: %s, %s", r.Old.Last(), r.Old.Identity)
	} else {
		pr("recorded position: none")
	}
	pr("table:             %s", r.Table)
	switch r.By {
	case ByCommitTimestamp:
		pr("rows chosen by:    commit timestamp (track_commit_timestamp = on) at or after %s (the last confirmed commit minus %s); rows without one by created_at at or after %s (recover.margin)", ts(r.CommitFrom), CommitSlack, ts(r.CreatedFrom))
	case ByCreatedAt:
		pr("rows chosen by:    created_at at or after %s: the last confirmed commit minus recover.margin (track_commit_timestamp = off: order by created_at, the transactions' start, which concurrent transactions may commit in another order)", ts(r.CreatedFrom))
	case BySnapshot:
		pr("rows chosen by:    transaction snapshot: every row inserted by a transaction not older than the snapshot recorded with the position (%s, at LSN %s: its oldest transaction then in progress and every later one), whatever its created_at (track_commit_timestamp = off; no clock is used); ordered by created_at", r.SnapshotFrom, r.SnapshotLSN)
	case ByAll:
		pr("rows chosen by:    every row of the table: the recorded position confirmed no transaction yet, so every row may be in the gap")
	case BySince:
		pr("rows chosen by:    --since: committed (created_at without commit timestamps) at or after %s", ts(r.CommitFrom))
	}
	verb := "found in the slot's snapshot"
	if r.DryRun {
		verb = "found now (the snapshot is taken when the slot is created)"
	}
	pr("rows:              %d %s, %d produced with walpost_recovered: true", r.Found, verb, r.Produced)
	pr("time range:        %s .. %s", ts(r.First), ts(r.Last))
	if r.By == BySnapshot {
		pr("re-sent:           %d row(s) of transactions that had ended by the recorded snapshot or by the position's last write: they may have been delivered before (consumers deduplicate on idempotency_key)", r.Resent)
	} else {
		pr("re-sent:           %d row(s) committed at or before the recorded last commit (most were delivered before; consumers deduplicate on idempotency_key)", r.Resent)
	}
	if !r.DryRun {
		pr("new position:      LSN %s (the new slot's consistent point), %s; walpost run streams from here", r.New.LSN, r.New.Identity)
	}
	switch {
	case r.ExactlyOnce && r.DryRun:
		pr("exactly-once:      recover runs only with --allow-duplicates (read_committed consumers see the re-sent rows twice); it then produces the gap inside Kafka transactions and resets the slot's checkpoint to the new slot's position")
	case r.ExactlyOnce && r.Txns > 0:
		pr("exactly-once:      produced in %d Kafka transaction(s); the last committed the checkpoint at LSN %s to %s (the new position: walpost run skips nothing past it); read_committed consumers see the re-sent rows twice", r.Txns, r.Checkpoint.LSN, r.CheckpointTopic)
	}
	oldest := "the table is empty"
	if !r.Oldest.IsZero() {
		oldest = "the oldest row in the table was created at " + ts(r.Oldest)
	}
	pr("not recoverable:   rows deleted before the snapshot (by the application in its own transaction, or by walpost prune) are gone; %s", oldest)
	if r.HadRow && !r.Old.LastCommit.IsZero() && r.Oldest.After(r.Old.LastCommit) {
		pr("warning:           no row created before the last confirmed commit (%s) is left: the gap's first rows may have been deleted too; keep outbox rows for a retention window (README, Runbook, \"Slot lost\")", ts(r.Old.LastCommit))
	}
	return nil
}
