package inbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/inbox"
)

// db is a test's own schema, first in the search_path of its pool and
// database/sql handle, holding the inbox's tables and a credits table;
// dropped at the end.
type db struct {
	Pool   *pgxpool.Pool
	SQL    *sql.DB
	Schema string
}

// newDB skips without WALPOST_POSTGRES_URL (scripts/stack.sh up, then
// . .stack/env), and fails without it under WALPOST_REQUIRE_STACK=1.
func newDB(t testing.TB) *db {
	t.Helper()
	url := os.Getenv("WALPOST_POSTGRES_URL")
	if url == "" {
		if os.Getenv("WALPOST_REQUIRE_STACK") == "1" {
			t.Fatal("WALPOST_POSTGRES_URL unset: run scripts/stack.sh up and source .stack/env")
		}
		t.Skip("WALPOST_POSTGRES_URL unset: run scripts/stack.sh up and source .stack/env")
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	d := &db{Schema: "inbox_" + hex.EncodeToString(b)}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `CREATE SCHEMA `+d.Schema); err != nil {
		t.Fatal(err)
	}
	admin.Close(ctx)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = d.Schema
	if d.Pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	d.SQL = stdlib.OpenDB(*cfg.ConnConfig)
	t.Cleanup(func() {
		_, _ = d.Pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+d.Schema+` CASCADE`)
		d.SQL.Close()
		d.Pool.Close()
	})
	if err := inbox.Migrate(ctx, d.Pool); err != nil {
		t.Fatal(err)
	}
	if err := inbox.Migrate(ctx, d.Pool); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	d.exec(t, `CREATE TABLE credits (account text PRIMARY KEY, amount bigint NOT NULL)`)
	return d
}

func (d *db) exec(t testing.TB, q string, args ...any) {
	t.Helper()
	if _, err := d.Pool.Exec(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func (d *db) int(t testing.TB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := d.Pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func record(p int32, off int64, key, lsn string, flags ...string) *kgo.Record {
	r := &kgo.Record{Topic: "payments", Partition: p, Offset: off, Key: []byte(key), Headers: []kgo.RecordHeader{
		{Key: "idempotency_key", Value: []byte(key)}, {Key: "commit_lsn", Value: []byte(lsn)}}}
	for _, f := range flags {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: f, Value: []byte("true")})
	}
	return r
}

func creditOne(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `INSERT INTO credits VALUES ('a1', 1) ON CONFLICT (account) DO UPDATE SET amount = credits.amount + 1`)
	return err
}

// The statements on PostgreSQL: a re-sent suffix through Apply, a replay
// and a duplicate through ApplySQL, a batch through ApplyBatch; the state
// is one watermark row per partition and one key row for the replay.
func TestPostgres(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	ctx := context.Background()
	in, err := inbox.New(inbox.Config{Group: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	apply := func(r *kgo.Record) bool {
		t.Helper()
		var applied bool
		if err := pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
			var err error
			applied, err = in.Apply(ctx, tx, r, creditOne)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return applied
	}
	applySQL := func(r *kgo.Record) bool {
		t.Helper()
		tx, err := d.SQL.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		applied, err := in.ApplySQL(ctx, tx, r, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO credits VALUES ('a1', 1) ON CONFLICT (account) DO UPDATE SET amount = credits.amount + 1`)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		return applied
	}
	for i, step := range []struct {
		apply func(*kgo.Record) bool
		rec   *kgo.Record
		want  bool
	}{
		{apply, record(0, 0, "a", "0/100"), true},
		{apply, record(0, 1, "b", "0/100"), true},
		{apply, record(0, 2, "a", "0/100"), false},
		{applySQL, record(0, 3, "c", "0/200"), true},
		{applySQL, record(0, 4, "b", "0/100"), false},
		{applySQL, record(0, 5, "x", "0/100", "replayed_from_poison"), true},
		{apply, record(0, 6, "x", "0/100", "replayed_from_poison"), false},
		{apply, record(1, 0, "c", "0/200"), true}, // another partition, its own watermark
	} {
		if got := step.apply(step.rec); got != step.want {
			t.Fatalf("step %d (%s): applied %v, want %v", i, step.rec.Key, got, step.want)
		}
	}
	var n int
	if err := pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
		var err error
		n, err = in.ApplyBatch(ctx, tx, []*kgo.Record{record(0, 7, "c", "0/200"), record(0, 8, "d", "0/300"),
			record(0, 9, "e", "0/300"), record(0, 10, "d", "0/300")}, func(ctx context.Context, tx pgx.Tx, fresh []*kgo.Record) error {
			for range fresh {
				if err := creditOne(ctx, tx); err != nil {
					return err
				}
			}
			return nil
		})
		return err
	}); err != nil || n != 2 {
		t.Fatalf("ApplyBatch: %d applied, %v; want 2", n, err)
	}
	if got := d.int(t, `SELECT amount FROM credits`); got != 7 {
		t.Fatalf("credited %d, want 7 (a b c x c d e)", got)
	}
	if w, k := d.int(t, `SELECT count(*) FROM inbox_watermark`), d.int(t, `SELECT count(*) FROM inbox_key`); w != 2 || k != 1 {
		t.Fatalf("%d watermark rows, %d key rows; want 2 and 1", w, k)
	}
	var lsn, keys string
	var next int64
	if err := d.Pool.QueryRow(ctx, `SELECT commit_lsn::text, keys::text, next_offset FROM inbox_watermark WHERE partition = 0`).Scan(&lsn, &keys, &next); err != nil {
		t.Fatal(err)
	}
	if lsn != "0/300" || keys != "{d,e}" || next != 11 {
		t.Fatalf("watermark %s %s %d, want 0/300 {d,e} 11", lsn, keys, next)
	}
}

// An effect that fails leaves nothing: the caller rolls back, and the
// record is new to the next attempt.
func TestPostgresEffectFails(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	ctx := context.Background()
	in, _ := inbox.New(inbox.Config{Group: "billing"})
	boom := errors.New("boom")
	err := pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
		_, err := in.Apply(ctx, tx, record(0, 0, "x", "0/100", "walpost_recovered"), func(ctx context.Context, tx pgx.Tx) error {
			if err := creditOne(ctx, tx); err != nil {
				return err
			}
			return boom
		})
		return err
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	var applied bool
	if err := pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
		applied, err = in.Apply(ctx, tx, record(0, 0, "x", "0/100", "walpost_recovered"), creditOne)
		return err
	}); err != nil || !applied {
		t.Fatalf("retry: applied %v, %v", applied, err)
	}
	if got := d.int(t, `SELECT amount FROM credits`); got != 1 {
		t.Fatalf("credited %d, want 1", got)
	}
}

// Concurrent members of one group on one partition (a rebalance's old and
// new owner) are serialised by the watermark row: 8 goroutines apply the
// same 200 records, each credit once.
func TestPostgresConcurrentMembers(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	ctx := context.Background()
	in, _ := inbox.New(inbox.Config{Group: "billing"})
	var recs []*kgo.Record
	for i := range 200 {
		lsn := "0/" + hex.EncodeToString([]byte{byte(i/4 + 1)})
		recs = append(recs, record(0, int64(i), "k"+hex.EncodeToString([]byte{byte(i)}), lsn))
		if i%50 == 7 {
			recs = append(recs, record(0, int64(i), "r"+hex.EncodeToString([]byte{byte(i)}), "0/1", "replayed_from_poison"))
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed error
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			step := 3 + g
			for i := 0; i < len(recs); i += step {
				batch := recs[max(0, i-5):min(i+step, len(recs))]
				err := pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
					_, err := in.ApplyBatch(ctx, tx, batch, func(ctx context.Context, tx pgx.Tx, fresh []*kgo.Record) error {
						_, err := tx.Exec(ctx, `INSERT INTO credits VALUES ('a1', $1) ON CONFLICT (account) DO UPDATE SET amount = credits.amount + $1`, len(fresh))
						return err
					})
					return err
				})
				if err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if failed != nil {
		t.Fatal(failed)
	}
	// Every goroutine ends at the last record, so every record was seen.
	if got := d.int(t, `SELECT amount FROM credits`); got != len(recs) {
		t.Fatalf("credited %d, want %d", got, len(recs))
	}
}

// Prune deletes key rows older than KeepFor, and none with KeepFor 0.
func TestPostgresPrune(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	ctx := context.Background()
	keep, _ := inbox.New(inbox.Config{Group: "billing"})
	in, _ := inbox.New(inbox.Config{Group: "billing", KeepFor: time.Hour})
	d.exec(t, `INSERT INTO inbox_key VALUES ('billing', 'payments', 'old', now() - interval '2 hours'), ('billing', 'payments', 'new', now()),
		('other', 'payments', 'old', now() - interval '2 hours')`)
	if n, err := keep.Prune(ctx, d.Pool); err != nil || n != 0 {
		t.Fatalf("KeepFor 0: pruned %d, %v", n, err)
	}
	if n, err := in.Prune(ctx, d.Pool); err != nil || n != 1 {
		t.Fatalf("pruned %d, %v; want 1", n, err)
	}
	if got := d.int(t, `SELECT count(*) FROM inbox_key`); got != 2 {
		t.Fatalf("%d key rows left, want 2 (the new one, the other group's)", got)
	}
}
