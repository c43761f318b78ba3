package poison_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/poison"
)

// newTable makes a poison table of the test's own, like poison_outbox,
// on the stack's PostgreSQL (WALPOST_POSTGRES_URL; skipped without it
// unless WALPOST_REQUIRE_STACK=1), dropped at cleanup.
func newTable(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	url := os.Getenv("WALPOST_POSTGRES_URL")
	if url == "" {
		if os.Getenv("WALPOST_REQUIRE_STACK") == "1" {
			t.Fatal("WALPOST_POSTGRES_URL unset: run scripts/stack.sh up and source .stack/env")
		}
		t.Skip("WALPOST_POSTGRES_URL unset: run scripts/stack.sh up and source .stack/env")
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	table := "poison_store_" + hex.EncodeToString(b)
	if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (LIKE poison_outbox INCLUDING ALL)`, table)); err != nil {
		t.Fatalf("%v (run walpost migrate on the stack first)", err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
	return pool, table
}

func entry(id, key string, lsn pglogrepl.LSN, payload string) poison.Entry {
	return poison.Entry{
		Event: &outbox.Event{ID: id, IdempotencyKey: key, Payload: []byte(payload), CreatedAt: "2026-11-29 22:50:51.123456+00",
			CommitLSN: lsn, CommitTime: time.Now()},
		Topic: "t", Attempts: 5, LastError: "MESSAGE_TOO_LARGE", ErrorClass: "MESSAGE_TOO_LARGE",
	}
}

const (
	id1 = "5f0c6c8e-2d3b-4c1a-9a57-0d5e1c8b7a11"
	id2 = "6a1d7d9f-3e4c-4d2b-8b68-1e6f2d9c8b22"
)

// TestStorePutIdentity: rows are keyed by the event's identity (outbox id,
// commit LSN): two events with one key are two rows, the same event put
// again is one row and no error, a different event that finds its identity
// taken is an ErrUnwritable naming outbox_id; Mark* address one row.
func TestStorePutIdentity(t *testing.T) {
	pool, table := newTable(t)
	ctx := context.Background()
	s := poison.NewStore(pool, table)
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
	first := entry(id1, "k", 0x1000, `{"n": 1}`)
	first.Event.CreatedAt = "2026-11-29 22:50:50+00"
	for i, e := range []poison.Entry{first, first, entry(id2, "k", 0x2000, `{"n": 2}`), entry("", "k", 0x3000, `{"n": 3}`), entry("", "k", 0x3000, `{"n": 3}`)} {
		if err := s.Put(ctx, e); err != nil {
			t.Fatalf("Put %d (%s at %s): %v", i, e.Event.ID, e.Event.CommitLSN, err)
		}
	}
	err := s.Put(ctx, entry(id1, "other-key", 0x1000, `{"n": 4}`))
	var te *poison.TableError
	if !errors.Is(err, poison.ErrUnwritable) || !errors.As(err, &te) || te.Column != "outbox_id" || !strings.Contains(err.Error(), `"k"`) {
		t.Fatalf("Put of a different event with a taken identity = %v, want a TableError on outbox_id naming the holder k", err)
	}
	rows, err := s.List(ctx, poison.Filter{Keys: []string{"k"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || rows[0].OutboxID != id1 || rows[1].OutboxID != id2 || rows[2].CommitLSN != "0/3000" || rows[2].OutboxID == "" {
		t.Fatalf("rows of k %+v, want 3: %s, %s, then the NULL id's derived one at 0/3000 (created_at, then commit order)", rows, id1, id2)
	}
	if err := s.MarkReplayed(ctx, rows[1]); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkFailed(ctx, rows[2], "again", "INVALID_RECORD"); err != nil {
		t.Fatal(err)
	}
	pending, err := s.List(ctx, poison.Filter{Keys: []string{"k"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 2 || pending[0].OutboxID != id1 || pending[1].ErrorClass != "INVALID_RECORD" || pending[0].ErrorClass != "MESSAGE_TOO_LARGE" {
		t.Fatalf("after marking one row replayed and one failed: %+v", pending)
	}
}

// TestStorePutRefusedValues: a value the table's types refuse is an
// ErrUnwritable naming the column and the fix, found by casting each value
// alone; after the fix (the column as text) the same Put succeeds.
func TestStorePutRefusedValues(t *testing.T) {
	pool, table := newTable(t)
	ctx := context.Background()
	s := poison.NewStore(pool, table)
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		e      poison.Entry
		column string
	}{
		{entry("order-7", "k-id", 0x1000, `{}`), "outbox_id"},
		{entry(id1, "k-json", 0x1000, `not json`), "payload"},
	} {
		err := s.Put(ctx, tt.e)
		var te *poison.TableError
		if !errors.As(err, &te) || !errors.Is(err, poison.ErrUnwritable) || te.Column != tt.column ||
			!strings.Contains(err.Error(), "ALTER COLUMN "+tt.column+" TYPE text") || te.Key != tt.e.Event.IdempotencyKey {
			t.Errorf("Put(%s) = %v, want a TableError on %s with its fix", tt.e.Event.IdempotencyKey, err, tt.column)
		}
	}
	if _, err := pool.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN outbox_id TYPE text`, table)); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check with outbox_id text: %v", err)
	}
	if err := s.Put(ctx, entry("order-7", "k-id", 0x1000, `{}`)); err != nil {
		t.Fatalf("Put after the fix: %v", err)
	}
}

// TestCheckTable: what Check refuses, with the column and the fix.
func TestCheckTable(t *testing.T) {
	for _, tt := range []struct {
		name, alter, want string
	}{
		{"commit_lsn as text", `ALTER TABLE %s ALTER COLUMN commit_lsn TYPE text`, "column commit_lsn: has type text"},
		{"payload dropped", `ALTER TABLE %s DROP COLUMN payload`, "column payload: is missing"},
		{"keyed by idempotency_key", `ALTER TABLE %s ADD UNIQUE (idempotency_key)`, "refuses a second event with one idempotency key"},
		{"no identity key", `ALTER TABLE %s DROP CONSTRAINT %[1]s_pkey`, "no unique key on the event's identity"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pool, table := newTable(t)
			ctx := context.Background()
			if _, err := pool.Exec(ctx, fmt.Sprintf(tt.alter, table)); err != nil {
				t.Fatal(err)
			}
			err := poison.CheckTable(ctx, pool, table)
			if !errors.Is(err, poison.ErrUnwritable) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "fix:") {
				t.Fatalf("CheckTable = %v, want ErrUnwritable with %q and a fix", err, tt.want)
			}
		})
	}
	pool, _ := newTable(t)
	if err := poison.CheckTable(context.Background(), pool, "no_such_poison_table"); !errors.Is(err, poison.ErrUnwritable) || !strings.Contains(err.Error(), "walpost migrate") {
		t.Fatalf("CheckTable of a missing table = %v, want ErrUnwritable saying run walpost migrate", err)
	}
}

// TestStoreRecent: the ages of the rows quarantined within the window, by
// the database's clock, oldest first.
func TestStoreRecent(t *testing.T) {
	pool, table := newTable(t)
	ctx := context.Background()
	s := poison.NewStore(pool, table)
	for i, ago := range []string{"2 hours", "10 minutes", "1 minute"} {
		if err := s.Put(ctx, entry(fmt.Sprintf("00000000-0000-0000-0000-%012d", i), "k", pglogrepl.LSN(0x1000*(i+1)), `{}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, fmt.Sprintf(`UPDATE %s SET poisoned_at = now() - $1::interval WHERE commit_lsn = $2::pg_lsn`, table), ago, pglogrepl.LSN(0x1000*(i+1)).String()); err != nil {
			t.Fatal(err)
		}
	}
	ages, err := s.Recent(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(ages) != 2 || ages[0] < 9*time.Minute || ages[0] > 11*time.Minute || ages[1] < 50*time.Second || ages[1] > 2*time.Minute {
		t.Fatalf("Recent(1h) = %v, want about [10m 1m]", ages)
	}
}
