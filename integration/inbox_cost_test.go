package integration

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/inbox"
)

// TestInboxCost compares an inbox.Consumer applying a no-op effect with
// the same loop without the inbox (a consumer group member, read_committed,
// one database transaction per polled batch, the Kafka commit after it; and
// the same with the Kafka commit in the background, as inbox.Consumer's),
// over the same records, side by side: events/s of each, and the inbox's
// state after the run. The records carry walpost's headers: transactions
// of 1 to 5 records, commit LSNs increasing per partition, 1 in 1,000
// replayed from poison. Run by hand (bench/results/inbox-*.md):
//
//	WALPOST_INBOX_COST=1 go test -run '^TestInboxCost$' -v ./integration
//
// WALPOST_INBOX_COST_EVENTS sets the count (default 1,000,000),
// WALPOST_INBOX_COST_BATCH the records per poll and transaction (1,000),
// WALPOST_INBOX_COST_REPLAY_EVERY the share of replayed records (1 in 1,000),
// WALPOST_INBOX_COST_EFFECT=write an effect of one write per batch,
// WALPOST_INBOX_COST_ONLY one loop only ("plain", "inbox" or "plain,
// background commits", to profile it). Each rate is the count over the
// time from the first record handed to the effect to the last (the last
// batch's commit is left out of both). Each loop also logs the CPU time
// the test's process, PostgreSQL's processes and Kafka's used during it.
func TestInboxCost(t *testing.T) {
	if os.Getenv("WALPOST_INBOX_COST") != "1" {
		t.Skip("a measurement: WALPOST_INBOX_COST=1")
	}
	n := envInt(t, "WALPOST_INBOX_COST_EVENTS", 1_000_000)
	costBatch = envInt(t, "WALPOST_INBOX_COST_BATCH", 1000)
	costWrite = os.Getenv("WALPOST_INBOX_COST_EFFECT") == "write"
	only := os.Getenv("WALPOST_INBOX_COST_ONLY")
	f := newFixture(t, fixtureOpts{partitions: 6})
	s := newInboxSchema(t, f)
	mustExec(t, s.pool, `CREATE TABLE cost_counter (n bigint NOT NULL); INSERT INTO cost_counter VALUES (0)`)
	replayed := produceWalpostLike(t, f, n, envInt(t, "WALPOST_INBOX_COST_REPLAY_EVERY", 1000))
	t.Logf("%d records in %d partitions, %d of them replayed", n, f.Partitions, replayed)

	for round := 1; round <= 4; round++ {
		in, err := inbox.New(inbox.Config{Group: fmt.Sprintf("inbox_%d_%s", round, f.Slot)})
		if err != nil {
			t.Fatal(err)
		}
		// Each goes first in turn: the first reads the topic from disk
		// caches the others then find warm.
		var plain, plainBg, withInbox float64
		names := []string{"plain", "inbox", "plain, background commits"}
		runs := []func(){
			func() { plain = runPlain(t, f, s.pool, n, fmt.Sprintf("plain_%d_%s", round, f.Slot), false) },
			func() { withInbox = runInbox(t, f, s.pool, in, n) },
			func() { plainBg = runPlain(t, f, s.pool, n, fmt.Sprintf("plainbg_%d_%s", round, f.Slot), true) },
		}
		for i := range runs {
			j := (i + round - 1) % len(runs)
			if only != "" && names[j] != only {
				continue
			}
			before := cpuByCommand("postgres", "java")
			runs[j]()
			after := cpuByCommand("postgres", "java")
			per := func(k string) float64 { return (after[k] - before[k]).Seconds() * 1e6 / float64(n) }
			t.Logf("round %d, %s: CPU s per 1M records: consumer %.2f, PostgreSQL %.2f, Kafka %.2f",
				round, names[j], per("self"), per("postgres"), per("java"))
		}
		t.Logf("round %d: plain %.0f events/s, plain with background commits %.0f events/s, inbox %.0f events/s (%.1f %% of plain, %.1f %% of plain with background commits)",
			round, plain, plainBg, withInbox, 100*withInbox/plain, 100*withInbox/plainBg)
		var marks, keys int
		if err := s.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM inbox_watermark WHERE consumer_group = $1),
			(SELECT count(*) FROM inbox_key WHERE consumer_group = $1)`, in.Group()).Scan(&marks, &keys); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: inbox state %d watermark rows, %d key rows", round, marks, keys)
		if marks != f.Partitions || keys != replayed {
			t.Errorf("state %d watermark rows (want %d), %d key rows (want %d)", marks, f.Partitions, keys, replayed)
		}
	}
}

// produceWalpostLike writes n records as walpost would, one in every
// replayEvery marked replayed (none when replayEvery > n), and returns how
// many are.
func produceWalpostLike(t *testing.T, f *fixture, n, replayEvery int) int {
	return produceWalpostLikeFrom(t, f, 0, n, replayEvery)
}

// produceWalpostLikeFrom is produceWalpostLike for the records after the
// first from ones an earlier call wrote: keys and commit LSNs go on above
// theirs.
func produceWalpostLikeFrom(t *testing.T, f *fixture, from, n, replayEvery int) int {
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(f.Topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	lsn := uint64(0x16B3748) + uint64(from)*0x1000 // at most one transaction per record
	replayed := 0
	var failed atomic.Value
	payload := []byte(`{"event": "account.debited", "amount": 30, "account": "a1"}`)
	for i := 0; i < n; {
		lsn += 0x1000
		size := 1 + i%5
		p := int32(i % f.Partitions)
		for j := 0; j < size && i < n; j++ {
			key := fmt.Sprintf("%08d-0000-7000-8000-000000000000", from+i)
			r := &kgo.Record{Partition: p, Key: []byte(key), Value: payload, Headers: []kgo.RecordHeader{
				{Key: "idempotency_key", Value: []byte(key)}, {Key: "outbox_id", Value: []byte(key)},
				{Key: "commit_lsn", Value: []byte(fmt.Sprintf("%X/%X", lsn>>32, uint32(lsn)))},
				{Key: "created_at", Value: []byte("2026-12-02T08:00:00.000000Z")}, {Key: "event_type", Value: []byte("account.debited")},
			}}
			if i%replayEvery == replayEvery-1 {
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: "replayed_from_poison", Value: []byte("true")})
				replayed++
			}
			cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
				if err != nil {
					failed.Store(err)
				}
			})
			i++
		}
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	return replayed
}

// consumerOpts are both loops' client options.
func consumerOpts(f *fixture) []kgo.Opt {
	return []kgo.Opt{kgo.FetchMaxWait(50 * time.Millisecond), kgo.FetchMaxPartitionBytes(4 << 20)}
}

// costBatch is the records per poll and transaction of both loops;
// costWrite makes both effects write one row per batch (a consumer that
// persists anything commits a write, and pays the WAL flush).
var (
	costBatch = 1000
	costWrite bool
)

// batchWrite is the effect's one write per batch, when costWrite.
func batchWrite(ctx context.Context, tx pgx.Tx, n int) error {
	if !costWrite {
		return nil
	}
	_, err := tx.Exec(ctx, `UPDATE cost_counter SET n = n + $1`, n)
	return err
}

// runPlain is the consumer without the inbox: the same group loop, a
// transaction per batch with a no-op effect per record, then the Kafka
// commit of the batch; with background, the batch is marked for franz-go's
// background commit instead (AutoCommitMarks, as inbox.Consumer does).
func runPlain(t *testing.T, f *fixture, pool *pgxpool.Pool, n int, group string, background bool) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	commits := kgo.DisableAutoCommit()
	if background {
		commits = kgo.AutoCommitMarks()
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(f.Topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), commits, kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, consumerOpts(f)...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var start, end time.Time
	done := 0
	for done < n {
		fetches := cl.PollRecords(ctx, costBatch)
		if ctx.Err() != nil {
			t.Fatalf("plain consumer: %d of %d after 5 min", done, n)
		}
		recs := fetches.Records()
		if len(recs) == 0 {
			cl.AllowRebalance()
			continue
		}
		if start.IsZero() {
			start = time.Now()
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for _, r := range recs {
				if err := noop(ctx, tx, r); err != nil {
					return err
				}
			}
			if done+len(recs) >= n {
				end = time.Now()
			}
			return batchWrite(ctx, tx, len(recs))
		}); err != nil {
			t.Fatal(err)
		}
		if background {
			cl.MarkCommitRecords(recs...)
		} else if err := cl.CommitRecords(ctx, recs...); err != nil {
			t.Fatal(err)
		}
		cl.AllowRebalance()
		done += len(recs)
	}
	return float64(n) / end.Sub(start).Seconds()
}

// noop is the effect of both loops: nothing.
func noop(context.Context, pgx.Tx, *kgo.Record) error { return nil }

// runInbox is inbox.Consumer over the same records.
func runInbox(t *testing.T, f *fixture, pool *pgxpool.Pool, in *inbox.Inbox, n int) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var handled atomic.Int64
	var first, last atomic.Int64
	c, err := inbox.NewConsumer(inbox.ConsumerConfig{
		Inbox: in, DB: pool, Brokers: brokers, Topics: []string{f.Topic}, MaxPollRecords: costBatch,
		KafkaOpts: consumerOpts(f),
		HandleBatch: func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
			for _, r := range recs {
				if handled.Add(1) == 1 {
					first.Store(time.Now().UnixNano())
				}
				if handled.Load() == int64(n) {
					last.Store(time.Now().UnixNano())
				}
				if err := noop(ctx, tx, r); err != nil {
					return err
				}
			}
			return batchWrite(ctx, tx, len(recs))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(ctx) }()
	// handled counts attempts; the state says what committed.
	waitFor(t, 5*time.Minute, "the inbox consumer to apply every record", func() bool {
		var next int64
		_ = pool.QueryRow(ctx, `SELECT coalesce(sum(next_offset), 0) FROM inbox_watermark WHERE consumer_group = $1`, in.Group()).Scan(&next)
		return next >= int64(n)
	})
	elapsed := time.Duration(last.Load() - first.Load())
	cancel()
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}
	if handled.Load() != int64(n) {
		t.Errorf("inbox consumer handled %d records, want %d", handled.Load(), n)
	}
	return float64(n) / elapsed.Seconds()
}
