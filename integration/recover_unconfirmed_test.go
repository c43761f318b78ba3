package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/walpost/walpost/verify"
)

// TestRecoverWithoutConfirmedCommit: an outbox transaction commits and is
// never confirmed; the position row (no last commit) is written an hour
// later, as the keepalive-only final write of a session writes it, and the
// slot is gone. walpost recover plans and produces that row: with no
// transaction ever confirmed it reads from the beginning of the table, not
// from the row's updated_at.
func TestRecoverWithoutConfirmedCommit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1})
	forgetPosition(t, f.Pool, f.Slot)
	ctx := context.Background()
	early := writeEvents(t, f, "early", 10)
	var lsn string
	if err := f.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	mustExec(t, f.Pool, fmt.Sprintf(`INSERT INTO walpost_position (slot, system_identifier, timeline, confirmed_lsn, last_commit_at, updated_at)
SELECT $1, (SELECT system_identifier FROM pg_control_system()), (SELECT timeline_id FROM pg_control_checkpoint()), $2::pg_lsn, NULL,
       (SELECT max(created_at) FROM %s) + interval '1 hour'`, f.Table), f.Slot, lsn)

	out, code := recoveryCommand(t, f.env(), "recover", "--dry-run")
	if code != 0 {
		t.Fatalf("walpost recover --dry-run: exit %d", code)
	}
	if n := queryInt(t, dryRE, out, 1); n != len(early) {
		t.Errorf("dry run plans %d rows, want the %d committed before the row's updated_at", n, len(early))
	}
	out, code = recoveryCommand(t, f.env(), "recover")
	if code != 0 {
		t.Fatalf("walpost recover: exit %d", code)
	}
	if found, produced := queryInt(t, rowsRE, out, 1), queryInt(t, rowsRE, out, 2); found != len(early) || produced != len(early) {
		t.Errorf("recover found %d and produced %d rows, want %d", found, produced, len(early))
	}
	rep := verify.Validate(early, observed(f.consumeAll(t, len(early), time.Minute)))
	if !rep.OK() || rep.Delivered != len(early) {
		t.Errorf("the unconfirmed transaction after recover: %s", rep)
	}
}
