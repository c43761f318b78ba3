package integration

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/inbox"
)

// TestInboxConsumerCutOffBeforeCommit: an inbox.Consumer whose database
// connection is cut off between its batch's statements and its COMMIT (its
// machine gone, a half-open connection) leaves the server a transaction
// holding its partitions' watermark rows. The member the partitions go to
// next applies the same records; it must not wait until the server
// notices the dead connection (hours): the server ends the cut-off batch
// after ConsumerConfig.IdleTimeout, and the records, which the cut-off
// batch never committed, are applied once, by the next member.
func TestInboxConsumerCutOffBeforeCommit(t *testing.T) {
	t.Parallel()
	// A consumer's first batch takes the watermarks the locked way (here
	// it creates the partition's row); a warm one writes them with a
	// compare-and-set from its cache. Each is cut off in turn.
	t.Run("first batch", func(t *testing.T) { t.Parallel(); inboxCutOff(t, false) })
	t.Run("warm consumer", func(t *testing.T) { t.Parallel(); inboxCutOff(t, true) })
}

func inboxCutOff(t *testing.T, warm bool) {
	f := newFixture(t, fixtureOpts{partitions: 1})
	s := newInboxSchema(t, f)
	const n = 50
	in, err := inbox.New(inbox.Config{Group: s.group})
	if err != nil {
		t.Fatal(err)
	}
	// produce writes n records as walpost does and returns them, read back.
	var seen []*kgo.Record
	produce := func() []*kgo.Record {
		t.Helper()
		produceWalpostLikeFrom(t, f, len(seen), n, n+1)
		want, got := len(seen)+n, []*kgo.Record(nil)
		f.read(t, 30*time.Second, 0, func(r *kgo.Record) { got = append(got, r) }, func() bool { return len(got) >= want })
		if len(got) != want {
			t.Fatalf("read %d of the %d records", len(got), want)
		}
		seen = got
		return got[want-n:]
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const idle = 6 * time.Second
	c, cutPool, proxy, app := cutOffConsumer(t, f, s, in, idle)
	runCtx, stopRun := context.WithCancel(ctx)
	ran := make(chan error, 1)
	running := false
	run := func() {
		running = true
		go func() { ran <- c.Run(runCtx) }()
	}
	t.Cleanup(func() {
		stopRun()
		proxy.Restore()
		if running {
			<-ran
		}
		cutPool.Close()
	})
	var recs []*kgo.Record
	var froze <-chan struct{}
	if warm {
		// The first batch commits; the consumer caches its watermark.
		produce()
		run()
		waitFor(t, 30*time.Second, "the consumer's first batch committed", func() bool {
			var next int64
			_ = s.pool.QueryRow(ctx, `SELECT coalesce(max(next_offset), 0) FROM inbox_watermark`).Scan(&next)
			return next >= n
		})
		froze = proxy.FreezeBefore(pgCommit)
		recs = produce()
	} else {
		recs = produce()
		froze = proxy.FreezeBefore(pgCommit)
		run()
	}
	awaitFrozen(t, froze, ran, 30*time.Second, "the consumer", "first COMMIT")
	// The cut-off batch's last statement: a warm consumer's is the
	// compare-and-set UPDATE (the cached way), a first batch's the UPDATE
	// of the locked way (storeSQL), after it created the partition's row.
	want := "UPDATE inbox_watermark w SET commit_lsn = coalesce("
	if warm {
		want = "UPDATE inbox_watermark w SET commit_lsn = x.l::pg_lsn"
	}
	var pid int32
	var last string
	for deadline := time.Now().Add(10 * time.Second); pid == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no backend of the consumer waits, idle in its transaction with an xid, for the COMMIT the proxy holds (last seen: %q)", last)
		}
		_ = f.Pool.QueryRow(ctx, `SELECT coalesce((SELECT pid FROM pg_stat_activity WHERE application_name = $1
			AND state = 'idle in transaction' AND backend_xid IS NOT NULL AND query LIKE $2 || '%'), 0),
			coalesce((SELECT string_agg(state || ': ' || left(query, 60), '; ') FROM pg_stat_activity WHERE application_name = $1), '')`,
			app, want).Scan(&pid, &last)
	}
	idleSince := time.Now()

	// The next member: the same records, in its own transaction, over a
	// connection of its own.
	next, cancelNext := context.WithTimeout(ctx, idle+20*time.Second)
	defer cancelNext()
	tx, err := s.pool.Begin(next)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	applied, err := in.ApplyBatch(next, tx, recs, func(context.Context, pgx.Tx, []*kgo.Record) error { return nil })
	if err == nil {
		err = tx.Commit(next)
	}
	if err != nil {
		var st string
		_ = f.Pool.QueryRow(ctx, `SELECT coalesce((SELECT state FROM pg_stat_activity WHERE pid = $1), 'gone')`, pid).Scan(&st)
		t.Fatalf("the next member's batch, %s after the cut-off one went idle (IdleTimeout %s; its backend: %s): %v",
			time.Since(idleSince).Round(time.Second), idle, st, err)
	}
	t.Logf("the next member applied the batch %s after the cut-off one went idle", time.Since(idleSince).Round(100*time.Millisecond))
	if applied != n {
		t.Errorf("the next member applied %d of the %d records, want all: the cut-off batch never committed", applied, n)
	}
}

// TestInboxConsumerCutOffReadingOffsets: the transaction in which an
// inbox.Consumer reads its partitions' offsets from the watermark rows (at
// each assignment) is bounded as a batch's: cut off before its ROLLBACK,
// it would hold a lock on inbox_watermark that blocks any DDL on it (a
// migration) until the server noticed the dead connection.
func TestInboxConsumerCutOffReadingOffsets(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1})
	s := newInboxSchema(t, f)
	produceWalpostLike(t, f, 10, 11)
	in, err := inbox.New(inbox.Config{Group: s.group})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const idle = 6 * time.Second
	c, cutPool, proxy, app := cutOffConsumer(t, f, s, in, idle)
	froze := proxy.FreezeBefore(pgRollback)
	runCtx, stopRun := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- c.Run(runCtx) }()
	t.Cleanup(func() {
		stopRun()
		proxy.Restore()
		<-ran
		cutPool.Close()
	})
	awaitFrozen(t, froze, ran, 30*time.Second, "the consumer", "ROLLBACK after reading its offsets")
	var pid int32
	waitFor(t, 10*time.Second, "a backend of the consumer idle in the transaction that read its offsets, waiting for the ROLLBACK the proxy holds", func() bool {
		_ = f.Pool.QueryRow(ctx, `SELECT coalesce((SELECT pid FROM pg_stat_activity WHERE application_name = $1
			AND state = 'idle in transaction' AND query LIKE 'SELECT topic, partition, next_offset FROM inbox_watermark%'), 0)`, app).Scan(&pid)
		return pid != 0
	})
	waitBackendGone(t, f, pid, idle, "the cut-off offsets read", "its lock on inbox_watermark blocks DDL")
}

// cutOffConsumer is an inbox.Consumer with a no-op effect whose database
// pool (search_path s's schema) goes through a proxy the test can freeze;
// app is its connections' application_name, unique to f (cut-off tests
// run side by side). The caller closes the pool once Run has returned.
func cutOffConsumer(t *testing.T, f *fixture, s *inboxSchema, in *inbox.Inbox, idle time.Duration) (*inbox.Consumer, *pgxpool.Pool, *tcpProxy, string) {
	t.Helper()
	proxy, u := pgProxy(t, f.PGURL)
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = s.schema
	app := "cutoff_" + f.Slot
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := inbox.NewConsumer(inbox.ConsumerConfig{
		Inbox: in, DB: pool, Brokers: brokers, Topics: []string{f.Topic}, IdleTimeout: idle,
		KafkaOpts:   []kgo.Opt{kgo.FetchMaxWait(100 * time.Millisecond)},
		HandleBatch: func(context.Context, pgx.Tx, []*kgo.Record) error { return nil },
	})
	if err != nil {
		pool.Close()
		t.Fatal(err)
	}
	return c, pool, proxy, app
}
