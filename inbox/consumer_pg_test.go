package inbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
)

// schemaPool is a pool whose search_path is a fresh schema with the
// inbox's tables and a credits table; skipped without the stack.
func schemaPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	url := os.Getenv("WALPOST_POSTGRES_URL")
	if url == "" {
		if os.Getenv("WALPOST_REQUIRE_STACK") == "1" {
			t.Fatal("WALPOST_POSTGRES_URL unset: run scripts/stack.sh up and source .stack/env")
		}
		t.Skip("WALPOST_POSTGRES_URL unset: run scripts/stack.sh up and source .stack/env")
	}
	ctx := context.Background()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	schema := "inbox_" + hex.EncodeToString(b)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`)
		pool.Close()
	})
	for _, q := range []string{`CREATE SCHEMA ` + schema, SQL, `CREATE TABLE credits (key text NOT NULL)`} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	return pool
}

// creditMember is a member of in's group crediting each new record's key.
func creditMember(t *testing.T, pool *pgxpool.Pool, in *Inbox) *Consumer {
	t.Helper()
	c, err := NewConsumer(ConsumerConfig{Inbox: in, DB: pool, Topics: []string{topic},
		Handle: func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
			_, err := tx.Exec(ctx, `INSERT INTO credits VALUES ($1)`, string(r.Key))
			return err
		}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Two members of one group: each batch of the first after its first goes
// the cached way (two round trips); when the second wrote the watermark
// meanwhile (a rebalance), the first's BEGIN finds it changed, nothing is
// applied that way, and the batch goes the locked way. Every record is
// credited once, and the cache was used.
func TestConsumerCachedWatermark(t *testing.T) {
	pool := schemaPool(t)
	ctx := context.Background()
	in, _ := New(Config{Group: "clearing"})
	a, b := creditMember(t, pool, in), creditMember(t, pool, in)
	var log []*kgo.Record
	for i := range 60 {
		log = append(log, rec(int32(i%2), int64(i/2), fmt.Sprintf("k%02d", i), fmt.Sprintf("0/%X", 0x100+i/3*0x10)))
	}
	log = append(log, rec(0, 30, "r1", "0/100", "replayed"), rec(1, 30, "r1", "0/100", "replayed"))
	cachedBefore := func(c *Consumer) bool { return len(c.cache) > 0 }
	steps := []struct {
		c          *Consumer
		from, to   int
		wantCached bool
	}{
		{a, 0, 10, false}, // first batch: locked
		{a, 10, 20, true}, // cached
		{b, 5, 30, false}, // the other member, from an older offset
		{a, 20, 40, true}, // cached, stale: falls back to locked
		{a, 40, 62, true}, // cached again
		{b, 30, 62, true}, // stale
		{a, 0, 62, true},  // everything again
	}
	for i, st := range steps {
		if got := cachedBefore(st.c); got != st.wantCached {
			t.Fatalf("step %d: cache present %v, want %v", i, got, st.wantCached)
		}
		if err := st.c.apply(ctx, log[st.from:st.to]); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	var n, distinct int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT key) FROM credits`).Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n != 61 || distinct != 61 {
		t.Fatalf("%d credits of %d keys, want 61 of 61", n, distinct)
	}
	if a.cached != 3 || a.stale != 1 || b.stale != 1 {
		t.Fatalf("member a: %d batches cached, %d stale; b: %d stale; want 3, 1, 1 (b's last batch changed nothing)", a.cached, a.stale, b.stale)
	}
}

// TestConsumerPartlyStaleRollsBack: when another member wrote one of a
// batch's watermark rows (a rebalance moved one partition), the cached
// compare-and-set matches the other row only; the transaction is rolled
// back with that row's new watermark and the key row sent with it, and the
// batch goes the locked way: every record credited once.
func TestConsumerPartlyStaleRollsBack(t *testing.T) {
	pool := schemaPool(t)
	ctx := context.Background()
	in, _ := New(Config{Group: "clearing"})
	a, b := creditMember(t, pool, in), creditMember(t, pool, in)
	var log []*kgo.Record
	for i := range 40 {
		log = append(log, rec(int32(i%2), int64(i/2), fmt.Sprintf("k%02d", i), fmt.Sprintf("0/%X", 0x100+i/3*0x10)))
	}
	var part1 []*kgo.Record // partition 1 of log[20:30], the other member's
	for _, r := range log[20:30] {
		if r.Partition == 1 {
			part1 = append(part1, r)
		}
	}
	batch := append(slices.Clone(log[20:40]), rec(0, 20, "r2", "0/100", "replayed"))
	for i, st := range []struct {
		c    *Consumer
		recs []*kgo.Record
	}{{a, log[0:10]}, {a, log[10:20]}, {b, part1}, {a, batch}} {
		if err := st.c.apply(ctx, st.recs); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	if a.stale != 1 {
		t.Fatalf("member a: %d stale batches, want 1 (partition 1 moved, partition 0 not)", a.stale)
	}
	var n, distinct int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT key) FROM credits`).Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n != 41 || distinct != 41 {
		t.Fatalf("%d credits of %d keys, want 41 of 41", n, distinct)
	}
}
