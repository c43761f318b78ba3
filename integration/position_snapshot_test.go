package integration

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/position"
)

// TestPositionSnapshotCandidateKept: the candidate snapshot a position
// write records is kept until the confirmed position reaches its LSN, so a
// walpost that lags more than one write interval still gets a snapshot:
// writes below the candidate's LSN leave it, the first write at it
// promotes it.
func TestPositionSnapshotCandidateKept(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1})
	forgetPosition(t, f.Pool, f.Slot)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sys := systemID(t, f)
	store := position.NewStore(f.Pool)
	row := position.Row{Slot: f.Slot, Identity: position.Identity{SystemID: sys, Timeline: 1}, LSN: 0x10}
	if err := store.Save(ctx, row); err != nil {
		t.Fatal(err)
	}
	first, _, err := store.Load(ctx, f.Slot)
	if err != nil || first.NextSnapshot == "" || first.NextSnapshotLSN <= 0x10 {
		t.Fatalf("after the first write: candidate %q at %s (%v), want one above 0/10", first.NextSnapshot, first.NextSnapshotLSN, err)
	}
	// Writes below the candidate's LSN (walpost lagging) keep it.
	for _, lsn := range []pglogrepl.LSN{first.NextSnapshotLSN - 2, first.NextSnapshotLSN - 1} {
		row.LSN = lsn
		if err := store.Save(ctx, row); err != nil {
			t.Fatal(err)
		}
	}
	lagging, _, err := store.Load(ctx, f.Slot)
	if err != nil || lagging.NextSnapshot != first.NextSnapshot || lagging.Snapshot != "" {
		t.Fatalf("after writes below the candidate: candidate %q (want %q kept), snapshot %q (want none), %v",
			lagging.NextSnapshot, first.NextSnapshot, lagging.Snapshot, err)
	}
	row.LSN = first.NextSnapshotLSN
	if err := store.Save(ctx, row); err != nil {
		t.Fatal(err)
	}
	reached, _, err := store.Load(ctx, f.Slot)
	if err != nil || reached.Snapshot != first.NextSnapshot || reached.SnapshotLSN != first.NextSnapshotLSN {
		t.Fatalf("after the write at the candidate's LSN: snapshot %q at %s, want %q at %s (%v)",
			reached.Snapshot, reached.SnapshotLSN, first.NextSnapshot, first.NextSnapshotLSN, err)
	}
}
