package inbox

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Consumer.Run against an in-process Kafka: every record is credited once,
// and after Run returns the group's offsets in Kafka equal the watermark
// rows' next offsets (the background commit, made before the consumer
// leaves), although no batch waited for a Kafka commit.
func TestConsumerRunCommitsOffsetsToKafka(t *testing.T) {
	pool := schemaPool(t)
	ctx := context.Background()
	const partitions, n = 3, 300
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := range n {
		r := rec(int32(i%partitions), -1, fmt.Sprintf("k%03d", i), fmt.Sprintf("0/%X", 0x100+i*0x10))
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	in, _ := New(Config{Group: "run"})
	c, err := NewConsumer(ConsumerConfig{Inbox: in, DB: pool, Brokers: brokers, Topics: []string{topic}, MaxPollRecords: 50,
		Handle: func(ctx context.Context, tx pgx.Tx, r *kgo.Record) error {
			_, err := tx.Exec(ctx, `INSERT INTO credits VALUES ($1)`, string(r.Key))
			return err
		}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var next int64
		if err := pool.QueryRow(ctx, `SELECT coalesce(sum(next_offset), 0) FROM inbox_watermark WHERE consumer_group = 'run'`).Scan(&next); err != nil {
			t.Fatal(err)
		}
		if next == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("watermarks at %d of %d records after 30 s", next, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var credits, distinct int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT key) FROM credits`).Scan(&credits, &distinct); err != nil {
		t.Fatal(err)
	}
	if credits != n || distinct != n {
		t.Fatalf("%d credits of %d keys, want %d of %d", credits, distinct, n, n)
	}
	adm := kadm.NewClient(prod)
	offs, err := adm.FetchOffsets(ctx, "run")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT partition, next_offset FROM inbox_watermark WHERE consumer_group = 'run'`)
	if err != nil {
		t.Fatal(err)
	}
	marks, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		P    int32
		Next int64
	}])
	if err != nil {
		t.Fatal(err)
	}
	if len(marks) != partitions {
		t.Fatalf("%d watermark rows, want %d", len(marks), partitions)
	}
	for _, m := range marks {
		o, ok := offs.Lookup(topic, m.P)
		if !ok || o.Err != nil || o.At != m.Next {
			t.Errorf("partition %d: Kafka holds offset %+v for the group, the watermark row %d", m.P, o, m.Next)
		}
	}
}

// The idle bound's argument: the default, a value in milliseconds, none
// when negative, PostgreSQL's limit for a larger one, 1 ms for less.
func TestConsumerIdleArg(t *testing.T) {
	in, err := New(Config{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		set    time.Duration
		ms     string
		bounds bool
	}{
		{0, "60000", true}, // DefaultIdleTimeout
		{1500 * time.Millisecond, "1500", true},
		{time.Microsecond, "1", true},
		{-1, "", false},
		{1000 * time.Hour, "2147483647", true},
	} {
		c, err := NewConsumer(ConsumerConfig{Inbox: in, DB: noDB{}, Topics: []string{"t"}, IdleTimeout: tc.set,
			Handle: func(context.Context, pgx.Tx, *kgo.Record) error { return nil }})
		if err != nil {
			t.Fatal(err)
		}
		if ms, ok := c.idleArg(); ms != tc.ms || ok != tc.bounds {
			t.Errorf("IdleTimeout %s: idle_in_transaction_session_timeout %q (set: %v), want %q (%v)", tc.set, ms, ok, tc.ms, tc.bounds)
		}
	}
}

// noDB is a DB for NewConsumer's checks only.
type noDB struct{}

func (noDB) Begin(context.Context) (pgx.Tx, error) { return nil, fmt.Errorf("noDB") }

func (noDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, fmt.Errorf("noDB")
}
