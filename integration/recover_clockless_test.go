package integration

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/walpost/walpost/verify"
)

// TestRecoverWithoutAClock: track_commit_timestamp off, recover.margin 1s.
// A transaction opened before walpost's last confirmed events stays open
// past the margin and commits in the gap, another one inserted its row
// under a savepoint (its xmin a subtransaction's xid) and also commits in
// the gap; the application also inserts 500 rows with created_at a day in
// the past during the gap. Rows chosen by created_at − recover.margin
// would miss all of them; chosen by the snapshot walpost records with its
// position (every row of a transaction not older than its oldest
// transaction in progress), walpost recover delivers every row of the gap
// (0 lost), and the rows it re-sends are those it counts (its report says
// "transaction snapshot").
func TestRecoverWithoutAClock(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 3})
	forgetPosition(t, f.Pool, f.Slot)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var ts string
	if err := f.Pool.QueryRow(ctx, `SHOW track_commit_timestamp`).Scan(&ts); err != nil || ts != "off" {
		t.Fatalf("track_commit_timestamp = %q (%v), want off", ts, err)
	}
	env := []string{"WALPOST_RECOVER_MARGIN=1s"}

	// The slot first: its creation waits for transactions in progress.
	p := f.start(env...)
	waitStreaming(t, p)
	// The long transaction: its row's created_at is its start.
	long, err := f.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Rollback(context.Background())
	if _, err := long.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES ('long-0', '{}'), ('long-1', '{}')`, f.Table)); err != nil {
		t.Fatal(err)
	}
	var longStart time.Time
	if err := long.QueryRow(ctx, `SELECT now()`).Scan(&longStart); err != nil {
		t.Fatal(err)
	}
	// A row inserted under a savepoint: its xmin is the subtransaction's
	// xid, which no snapshot lists while its transaction is in progress.
	sp, err := f.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Rollback(context.Background())
	for _, q := range []string{`SAVEPOINT a`, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES ('savepoint-0', '{}')`, f.Table), `RELEASE SAVEPOINT a`} {
		if _, err := sp.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}

	// The confirmed events commit more than recover.margin after the long
	// transaction began.
	time.Sleep(time.Until(longStart.Add(2 * time.Second)))
	before := writeEvents(t, f, "before", 200)
	var target string
	if err := f.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&target); err != nil {
		t.Fatal(err)
	}
	// A recorded snapshot taken after the last of them committed: a
	// candidate becomes the row's snapshot at the first position write
	// that confirms past it, and walpost writes when it confirmed a
	// transaction, so a few more transactions go through until then.
	more := 0
	waitFor(t, time.Minute, "walpost_position's snapshot past the confirmed events", func() bool {
		var ok bool
		err := f.Pool.QueryRow(ctx, `SELECT snapshot_lsn >= $2::pg_lsn FROM walpost_position WHERE slot = $1`, f.Slot, target).Scan(&ok)
		if err == nil && ok {
			return true
		}
		exp, err := f.writeTxn(ctx, fmt.Sprintf("more-t%d", more), []string{fmt.Sprintf("more-t%d-r0", more)}, `{}`)
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, exp...)
		more++
		return false
	})
	t.Logf("%d more transactions until the recorded snapshot passed the confirmed events", more)
	if _, err := p.signal(syscall.SIGTERM, time.Minute); err != nil {
		t.Fatalf("walpost did not stop: %v", err)
	}
	mustExec(t, f.Pool, `SELECT pg_drop_replication_slot($1)`, f.Slot)

	gap := writeEvents(t, f, "gap", 100)
	var backdated []verify.Expected
	for i := 0; i < 500; i += 50 {
		txn := fmt.Sprintf("backdated-t%d", i/50)
		tx, err := f.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 50; j++ {
			key := fmt.Sprintf("%s-r%d", txn, j)
			if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload, created_at) VALUES ($1, '{}', now() - interval '1 day')`, f.Table), key); err != nil {
				t.Fatal(err)
			}
			backdated = append(backdated, verify.Expected{Key: key, Txn: txn, Index: j})
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := long.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sp.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	gap = append(gap, verify.Expected{Key: "savepoint-0", Txn: "savepoint", Index: 0})
	gap = append(gap, backdated...)
	gap = append(gap, verify.Expected{Key: "long-0", Txn: "long", Index: 0}, verify.Expected{Key: "long-1", Txn: "long", Index: 1})
	recoverAndCheck(t, f, f, env, before, gap, "transaction snapshot")
}
