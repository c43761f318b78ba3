package integration

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/replication"
)

// TestTransactionTimeoutOfTheRole: PostgreSQL 17's transaction_timeout on
// walpost's role (as a managed service or a DBA sets it) must not end
// walpost's transactions (recover's and resend's snapshot transactions
// run for as long as their gap): walpost's connections, single and
// pooled, and the replication connection, set it to 0. Before 17 there is no such setting, and the
// connections must open as before (it is not sent as a startup
// parameter, which those servers refuse). Run on every major by
// scripts/test-pg.sh.
func TestTransactionTimeoutOfTheRole(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var major int
	if err := f.Pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int / 10000`).Scan(&major); err != nil {
		t.Fatal(err)
	}
	role := randName("wp_tt")
	mustExec(t, f.Pool, `CREATE ROLE `+role+` LOGIN REPLICATION PASSWORD 'wp'`)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = f.Pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, role)
		_, _ = f.Pool.Exec(ctx, `DROP ROLE `+role)
	})
	if major >= 17 {
		mustExec(t, f.Pool, `ALTER ROLE `+role+` SET transaction_timeout = '1s'`)
	}
	u, err := url.Parse(f.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, "wp")

	// A transaction longer than the role's bound: it commits.
	longTxn := func(q interface {
		Begin(context.Context) (pgx.Tx, error)
	}) error {
		return pgx.BeginFunc(ctx, q, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT pg_sleep(1.5)`)
			return err
		})
	}
	conn, err := replication.ConnectSQL(ctx, u.String())
	if err != nil {
		t.Fatalf("PostgreSQL %d: a single connection: %v", major, err)
	}
	defer conn.Close(context.Background())
	pool, err := replication.NewPool(ctx, u.String())
	if err != nil {
		t.Fatalf("PostgreSQL %d: a pool: %v", major, err)
	}
	defer pool.Close()
	for name, q := range map[string]interface {
		Begin(context.Context) (pgx.Tx, error)
	}{"single connection": conn, "pool": pool} {
		if err := longTxn(q); err != nil {
			t.Errorf("PostgreSQL %d, %s: a 1.5 s transaction under the role's transaction_timeout of 1s: %v", major, name, err)
		}
	}
	// The replication connection: its walsender decodes and sends each
	// transaction inside one of its own, which the role's bound would end
	// while walpost reads slowly (Kafka slow or away).
	repl, err := replication.ConnectReplication(ctx, u.String())
	if err != nil {
		t.Fatalf("PostgreSQL %d: a replication connection: %v", major, err)
	}
	defer repl.Close(context.Background())
	if major >= 17 {
		res, err := repl.Exec(ctx, `SHOW transaction_timeout`).ReadAll()
		if err != nil || len(res) != 1 || len(res[0].Rows) != 1 || string(res[0].Rows[0][0]) != "0" {
			got := "?"
			if err == nil && len(res) == 1 && len(res[0].Rows) == 1 {
				got = string(res[0].Rows[0][0])
			}
			t.Errorf("PostgreSQL %d: the replication connection's transaction_timeout is %s (%v), want 0", major, got, err)
		}
	}
	// walpost check names what the role sets (its own connection is a
	// plain one, to show what the others get), and nothing the server
	// does not have.
	out, _ := walpostOutput(t, f.env("WALPOST_POSTGRES_URL="+u.String()), "check")
	if major >= 17 && !strings.Contains(out, "transaction_timeout=1s") {
		t.Errorf("PostgreSQL %d: walpost check does not name the role's transaction_timeout:\n%s", major, out)
	}
	if major < 17 && (strings.Contains(out, "transaction_timeout") || !strings.Contains(out, "lock_timeout are 0")) {
		t.Errorf("PostgreSQL %d: walpost check names a setting the server does not have, or no settings:\n%s", major, out)
	}
	if major < 17 {
		t.Logf("PostgreSQL %d has no transaction_timeout: the connections opened and ran a 1.5 s transaction", major)
	}
}
