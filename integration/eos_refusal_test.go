package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/verify"
)

// TestExactlyOnceBrokerRefusal: Kafka itself refuses a batch for one
// record in it. The topic (one partition) allows timestamps at most an
// hour ahead (message.timestamp.after.max.ms, Kafka 4's default, set
// explicitly), the Debezium profile takes the record timestamp from a
// column (mapping.timestamp_column), and row 50 of a 100-row PostgreSQL
// transaction carries a timestamp a day ahead. With kafka.linger 20ms
// the rows go in batches, so the broker answers INVALID_TIMESTAMP for the
// culprit's batch and franz-go fails every buffered record of the
// partition with it. Exactly-once, poison.max_attempts 2: only the
// culprit lands in the poison table, after two refusals it got alone,
// and a read_committed consumer sees the other 99 exactly once, in order.
func TestExactlyOnceBrokerRefusal(t *testing.T) {
	t.Parallel()
	after := "3600000"
	f := newFixture(t, fixtureOpts{partitions: 1, topicConfig: map[string]*string{"message.timestamp.after.max.ms": &after}})
	mustExec(t, f.Pool, fmt.Sprintf(`DROP TABLE %s`, f.Table))
	mustExec(t, f.Pool, fmt.Sprintf(`CREATE TABLE %s (
		id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
		aggregatetype varchar(255) NOT NULL,
		aggregateid varchar(255) NOT NULL,
		type varchar(255) NOT NULL,
		payload jsonb,
		ts timestamptz NOT NULL DEFAULT now())`, f.Table))
	mustExec(t, f.Pool, fmt.Sprintf(`ALTER PUBLICATION %s ADD TABLE %s`, f.Publication, f.Table))
	p := f.start(f.exactlyOnceEnv("WALPOST_MAPPING_PROFILE=debezium", "WALPOST_MAPPING_TOPIC_TEMPLATE=${routedByValue}",
		"WALPOST_MAPPING_TIMESTAMP_COLUMN=ts", "WALPOST_KAFKA_LINGER=20ms", "WALPOST_POISON_MAX_ATTEMPTS=2")...)
	waitStreaming(t, p)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const rows, bad = 100, 50
	var expected []verify.Expected
	b := &pgx.Batch{}
	for i := range rows {
		key, ts := fmt.Sprintf("row-%d", i), "now()"
		if i == bad {
			ts = "now() + interval '1 day'"
		} else {
			expected = append(expected, verify.Expected{Key: key, Txn: "big", Index: len(expected)})
		}
		b.Queue(fmt.Sprintf(`INSERT INTO %s (aggregatetype, aggregateid, type, payload, ts) VALUES ($1, $2, 'Created', '{}', %s)`, f.Table, ts), f.Topic, key)
	}
	tx, err := f.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var culprit string
	if err := f.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT id::text FROM %s WHERE aggregateid = $1`, f.Table), fmt.Sprintf("row-%d", bad)).Scan(&culprit); err != nil {
		t.Fatal(err)
	}

	// The first poison row is the culprit's (an innocent one's was the
	// bug), and none follows it.
	poisoned := func() []string {
		rs, err := f.Pool.Query(ctx, fmt.Sprintf(`SELECT partition_key FROM %s ORDER BY poisoned_at`, f.PoisonTable))
		if err != nil {
			t.Fatal(err)
		}
		keys, err := pgx.CollectRows(rs, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	want := []string{fmt.Sprintf("row-%d", bad)}
	committed := time.Now()
	waitFor(t, 2*time.Minute, "a poison row", func() bool {
		alive(t, p, "while Kafka refused a record")
		return len(poisoned()) > 0
	})
	if got := poisoned(); !slices.Equal(got, want) {
		t.Fatalf("poison rows of %v, want only the culprit %v", got, want)
	}
	t.Logf("the culprit quarantined %s after its transaction committed, after %d failed sessions",
		time.Since(committed).Round(time.Millisecond), logCount(p, "session failed"))
	verifyReadCommitted(t, f, expected, 2*time.Minute)
	if got := poisoned(); !slices.Equal(got, want) {
		t.Fatalf("poison rows of %v, want only the culprit %v", got, want)
	}
	var id, class string
	var attempts int
	if err := f.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT idempotency_key, attempts, error_class FROM %s`, f.PoisonTable)).Scan(&id, &attempts, &class); err != nil {
		t.Fatal(err)
	}
	if id != culprit || attempts != 2 || class != "INVALID_TIMESTAMP" {
		t.Errorf("poison row: id %s, %d attempts, %s; want %s, 2, INVALID_TIMESTAMP", id, attempts, class, culprit)
	}
	if n := logCount(p, "kafka refused a batch inside a transaction"); n == 0 {
		t.Errorf("no refused batch logged: the culprit was never in a batch with others, so the test did not exercise franz-go failing the partition's records together")
	}
	if n := logCount(p, "kafka refused a record inside a transaction"); n != 2 {
		t.Errorf("%d refusals counted, want poison.max_attempts = 2 (the culprit's alone)", n)
	}
	alive(t, p, "after the quarantine")
}
