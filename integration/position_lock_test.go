package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walpost/walpost/position"
)

// cutOffDB is a position.DB whose transactions never commit: Commit waits
// for release, as a client cut off between its UPDATE and its COMMIT
// does. The server sees the transaction idle, holding the row's lock.
type cutOffDB struct {
	*pgx.Conn
	release <-chan struct{}
}

func (d cutOffDB) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := d.Conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return cutOffTx{Tx: tx, release: d.release}, nil
}

type cutOffTx struct {
	pgx.Tx
	release <-chan struct{}
}

func (t cutOffTx) Commit(context.Context) error {
	<-t.release
	return errors.New("the connection was cut off before its COMMIT")
}

// TestPositionWriteNotHeldByACutOffWrite: a position write whose
// connection was cut off between its UPDATE and its COMMIT (a half-open
// connection: the server does not notice for hours) leaves a transaction
// holding the row's lock. The next session's write must not wait behind
// it (it gives up after the lock bound, and forwarding goes on), and the
// server must end the abandoned transaction after the idle bound, so the
// position is written again. Before both bounds, a new session's start
// waited at its first position write until the old connection came back.
func TestPositionWriteNotHeldByACutOffWrite(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1})
	forgetPosition(t, f.Pool, f.Slot)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sys := systemID(t, f)
	row := position.Row{Slot: f.Slot, Identity: position.Identity{SystemID: sys, Timeline: 1}, LSN: 0x10}
	if err := position.NewStore(f.Pool).Save(ctx, row); err != nil {
		t.Fatal(err)
	}

	conn, err := pgx.Connect(ctx, f.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	cutDone := make(chan error, 1)
	t.Cleanup(func() {
		close(release)
		<-cutDone
		_ = conn.Close(context.Background())
	})
	pid := conn.PgConn().PID()
	const idle = 4 * time.Second
	cut := position.NewStore(cutOffDB{Conn: conn, release: release})
	cut.IdleTimeout = idle
	go func() {
		r := row
		r.LSN = 0x20
		cutDone <- cut.Save(ctx, r)
	}()
	// Idle in its transaction after the INSERT (it has an xid then; it
	// is idle between its earlier statements too, without one).
	var state string
	for deadline := time.Now().Add(10 * time.Second); state != "idle in transaction, INSERT"; {
		if time.Now().After(deadline) {
			t.Fatalf("the cut-off write's backend (pid %d) is %q, not idle in its transaction after its INSERT", pid, state)
		}
		_ = f.Pool.QueryRow(ctx, `SELECT coalesce((SELECT state || ', ' || split_part(query, ' ', 1) FROM pg_stat_activity
			WHERE pid = $1 AND backend_xid IS NOT NULL), '')`, pid).Scan(&state)
		time.Sleep(20 * time.Millisecond)
	}
	idleSince := time.Now()

	next := position.NewStore(f.Pool)
	next.LockTimeout = 500 * time.Millisecond
	r := row
	r.LSN = 0x30
	start := time.Now()
	err = next.Save(ctx, r)
	took := time.Since(start)
	if err == nil {
		t.Fatalf("a write behind the cut-off one's lock succeeded after %s: it waited for the lock instead of giving up after 500ms", took.Round(time.Millisecond))
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" || !strings.Contains(err.Error(), "holds the lock") || took >= idle {
		t.Fatalf("a write behind the cut-off one's lock: %v after %s, want the lock bound's error after about 500ms", err, took.Round(time.Millisecond))
	}
	t.Logf("the write behind the lock gave up after %s: %v", took.Round(time.Millisecond), err)

	// The server ends the abandoned transaction after the idle bound;
	// then the write goes through, and the cut-off one's value is gone.
	for deadline := time.Now().Add(idle + 15*time.Second); ; {
		if err = next.Save(ctx, r); err == nil {
			break
		}
		if time.Now().After(deadline) {
			var st string
			_ = f.Pool.QueryRow(ctx, `SELECT coalesce((SELECT state FROM pg_stat_activity WHERE pid = $1), 'gone')`, pid).Scan(&st)
			t.Fatalf("the position was still not written %s after the cut-off write went idle (its backend: %s): %v",
				time.Since(idleSince).Round(time.Second), st, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("written again %s after the cut-off write went idle", time.Since(idleSince).Round(100*time.Millisecond))
	got, _, err := position.NewStore(f.Pool).Load(ctx, f.Slot)
	if err != nil || got.LSN != 0x30 {
		t.Fatalf("stored position %s (%v), want 0/30", got.LSN, err)
	}
}
