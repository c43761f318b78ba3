package integration

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// TestPruneNeverOnAnotherServer: walpost prunes the outbox
// (outbox.retention) on the stack's cluster through a proxy; then the
// proxy sends every new connection to another cluster that holds a copy of
// walpost_position naming the stack's system identifier (a restore, or a
// DNS name moved) and old outbox rows, and refuses replication there
// (max_wal_senders = 0), so no session can check it. The background prune
// keeps trying, from the pool's new connections, and must delete nothing
// there: each pass checks that its own connection reaches the system the
// last session checked, logs the refusal and counts it.
func TestPruneNeverOnAnotherServer(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var sysA int64
	if err := f.Pool.QueryRow(ctx, `SELECT system_identifier FROM pg_control_system()`).Scan(&sysA); err != nil {
		t.Fatal(err)
	}

	// The other cluster: walpost's tables under the fixture's names, the
	// stack's position row, 50 rows an hour old.
	srv := scratchServer(t, "logical")
	if err := runWalpost(t, []string{"WALPOST_POSTGRES_URL=" + srv.url}, "migrate"); err != nil {
		t.Fatalf("migrate the other cluster: %v", err)
	}
	poolB, err := pgxpool.New(ctx, srv.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(poolB.Close)
	mustExec(t, poolB, `ALTER SYSTEM SET max_wal_senders = 0`)
	mustExec(t, poolB, fmt.Sprintf(`CREATE TABLE %s (LIKE outbox INCLUDING ALL)`, f.Table))
	mustExec(t, poolB, fmt.Sprintf(`CREATE TABLE %s (LIKE poison_outbox INCLUDING ALL)`, f.PoisonTable))
	mustExec(t, poolB, `INSERT INTO walpost_position (slot, system_identifier, timeline, confirmed_lsn, last_commit_at, updated_at)
VALUES ($1, $2, 1, '0/5000000', now(), now())`, f.Slot, sysA)
	mustExec(t, poolB, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload, created_at) SELECT 'other-' || g, '{}', now() - interval '1 hour' FROM generate_series(1, 50) g`, f.Table))
	poolB.Close()
	if err := srv.ctl("pg-restart"); err != nil { // max_wal_senders needs a restart
		t.Fatal(err)
	}
	poolB, err = pgxpool.New(ctx, srv.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(poolB.Close)
	countB := func() int {
		var n int
		if err := poolB.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE idempotency_key LIKE 'other-%%'`, f.Table)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	proxy, proxied := pgProxy(t, f.PGURL)
	p := f.start("WALPOST_POSTGRES_URL="+proxied, "WALPOST_OUTBOX_RETENTION=1s", "WALPOST_OUTBOX_PRUNE_INTERVAL=200ms")
	waitStreaming(t, p)
	exp := writeEvents(t, f, "here", 20)
	verifyDelivery(t, f, exp, time.Minute)
	waitFor(t, time.Minute, "a prune pass on the stack's cluster", func() bool { return logCount(p, `msg="pruned the outbox"`) > 0 })

	u, err := url.Parse(srv.url)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Retarget(u.Host)
	proxy.Cut() // every open connection ends; new ones reach the other cluster
	proxy.Restore()
	waitFor(t, time.Minute, "two prune passes refused on the other cluster", func() bool {
		alive(t, p, "while the URL reached the other cluster")
		return logCount(p, "outbox prune refused on another server") >= 2 || countB() < 50
	})
	if n := countB(); n != 50 {
		t.Errorf("%d of the other cluster's 50 old rows left: walpost pruned a server no session checked", n)
	}
	if logCount(p, "outbox prune refused on another server") == 0 {
		t.Errorf("no prune refusal logged:\n%s", tail(p.log, 20))
	}
}
