package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/prune"
)

// TestPruneBatchCutOffBeforeCommit: a prune batch whose connection is cut
// off between its DELETE and its COMMIT (half-open: the server sees an
// idle transaction, not a dead client) must not hold its row locks, its
// xid and the xmin horizon until the server notices, hours later: the
// server ends it after prune.IdleTimeout, the rows stay (the batch rolled
// back), and the next pass deletes them.
func TestPruneBatchCutOffBeforeCommit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1})
	forgetPosition(t, f.Pool, f.Slot)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	written := writeEvents(t, f, "cut", 50)
	var sys int64
	var lsn string
	var now time.Time
	if err := f.Pool.QueryRow(ctx, `SELECT system_identifier, pg_current_wal_lsn()::text, now() FROM pg_control_system()`).Scan(&sys, &lsn, &now); err != nil {
		t.Fatal(err)
	}
	at, err := pglogrepl.ParseLSN(lsn)
	if err != nil {
		t.Fatal(err)
	}
	id := position.Identity{SystemID: sys, Timeline: 1}
	if err := position.NewStore(f.Pool).Save(ctx, position.Row{Slot: f.Slot, Identity: id, LSN: at, LastCommit: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Postgres.Table, cfg.Postgres.PoisonTable, cfg.Postgres.Slot = f.Table, f.PoisonTable, f.Slot
	cfg.Recover.Margin = 0
	p := &prune.Pruner{Config: cfg}
	opts := prune.Options{OlderThan: time.Millisecond}
	count := func() int {
		var n int
		if err := f.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE idempotency_key LIKE 'cut-%%'`, f.Table)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	const idle = 5 * time.Second
	was := prune.IdleTimeout
	prune.IdleTimeout = idle // only this test changes it
	t.Cleanup(func() { prune.IdleTimeout = was })
	proxy, u := pgProxy(t, f.PGURL)
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	pid := conn.PgConn().PID()
	froze := proxy.FreezeBefore(pgCommit)
	passCtx, stopPass := context.WithCancel(ctx)
	passed := make(chan error, 1)
	go func() {
		_, err := p.Pass(passCtx, conn, id, opts)
		passed <- err
	}()
	t.Cleanup(func() {
		stopPass()
		proxy.Restore()
		<-passed
		_ = conn.Close(context.Background())
	})

	awaitFrozen(t, froze, passed, 20*time.Second, "the prune pass", "first COMMIT")
	// The batch's backend waits, idle, with the rows deleted in its
	// transaction (an xid), for a COMMIT that does not come.
	waitFor(t, 20*time.Second, fmt.Sprintf("the cut-off batch's backend (pid %d) idle in its transaction with an xid", pid), func() bool {
		var state string
		_ = f.Pool.QueryRow(ctx, `SELECT coalesce((SELECT state FROM pg_stat_activity WHERE pid = $1 AND backend_xid IS NOT NULL), '')`, pid).Scan(&state)
		return state == "idle in transaction"
	})
	waitBackendGone(t, f, int32(pid), idle, "the cut-off batch", "its transaction holds the rows, its xid and the xmin horizon")
	if n := count(); n != len(written) {
		t.Fatalf("%d of the %d rows left after the cut-off batch, want all (it never committed)", n, len(written))
	}

	direct, err := pgx.Connect(ctx, f.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close(context.Background())
	rep, err := p.Pass(ctx, direct, id, opts)
	if err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 || rep.Deleted < len(written) {
		t.Fatalf("the next pass deleted %d rows, %d of ours left; want all %d deleted", rep.Deleted, n, len(written))
	}
}

// awaitFrozen waits until the proxy has frozen a connection (froze), and
// fails when the code under test ended first (its error comes on ended,
// put back for the cleanup: ended needs room for one) or nothing froze
// within timeout; what names the code, awaited what the proxy waits for.
func awaitFrozen(t *testing.T, froze <-chan struct{}, ended chan error, timeout time.Duration, what, awaited string) {
	t.Helper()
	select {
	case <-froze:
	case err := <-ended:
		ended <- err
		t.Fatalf("%s ended before its %s: %v", what, awaited, err)
	case <-time.After(timeout):
		t.Fatalf("%s sent no %s within %s", what, awaited, timeout)
	}
}

// waitBackendGone waits until the server has ended backend pid, which is
// idle in a transaction from now on, within its idle bound (and 15 s for
// a busy machine); what names it, held what the transaction keeps.
func waitBackendGone(t *testing.T, f *fixture, pid int32, bound time.Duration, what, held string) {
	t.Helper()
	since := time.Now()
	for deadline := since.Add(bound + 15*time.Second); ; time.Sleep(100 * time.Millisecond) {
		var st string
		if err := f.Pool.QueryRow(context.Background(), `SELECT coalesce((SELECT state FROM pg_stat_activity WHERE pid = $1), 'gone')`, pid).Scan(&st); err != nil {
			t.Fatal(err)
		}
		if st == "gone" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's backend is still %q %s after it went idle (bound %s): %s", what, st, time.Since(since).Round(time.Second), bound, held)
		}
	}
	t.Logf("the server ended %s %s after it went idle", what, time.Since(since).Round(100*time.Millisecond))
}
