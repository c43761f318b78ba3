package integration

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/verify"
)

// TestKafkaDownAtATopicsFirstEvent: Kafka becomes unreachable before the
// first event of a topic walpost has not produced to yet, so its size
// pre-check cannot read the topic's max.message.bytes, and stays away for
// 60 s (20 s in make test) while events for that topic are committed. walpost holds them
// (the session goes on: no restart, no reconnect, nothing quarantined)
// and delivers every one, in order, once Kafka is back.
func TestKafkaDownAtATopicsFirstEvent(t *testing.T) {
	t.Parallel()
	f := stackFixture(t, 3)
	other := *f
	other.Topic = f.Topic + "-first"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	resp, err := f.Admin.CreateTopic(ctx, 3, -1, nil, other.Topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic: %v", err)
	}
	t.Cleanup(func() { _, _ = f.Admin.DeleteTopics(context.Background(), other.Topic) })
	waitFor(t, 30*time.Second, "the broker's metadata to list topic "+other.Topic, func() bool {
		td, err := f.Admin.ListTopics(ctx, other.Topic)
		return err == nil && td[other.Topic].Err == nil && len(td[other.Topic].Partitions) == 3
	})

	proxy, seed := kafkaProxy(t)
	p := f.start("WALPOST_KAFKA_BROKERS="+seed, "WALPOST_PIPELINE_MAX_INFLIGHT_EVENTS=500")
	waitStreaming(t, p)
	// Traffic to the default topic first: the session is producing.
	pre, err := f.writeTxn(ctx, "pre", []string{"pre-0", "pre-1", "pre-2"}, `{"data": "pre"}`)
	if err != nil {
		t.Fatal(err)
	}
	verifyDelivery(t, f, pre, time.Minute)
	throughProxy(t, proxy)

	// 60 s in the acceptance run (WALPOST_ACCEPTANCE=1); 20 s in make
	// test, which before the fix already saw 2-4 session restarts.
	outage := 20 * time.Second
	if os.Getenv("WALPOST_ACCEPTANCE") == "1" {
		outage = 60 * time.Second
	}
	proxy.Cut()
	down := time.Now()
	var expected []verify.Expected
	n := 0
	// Events for the new topic all through the outage: more than the
	// in-flight limit, so the reader also waits behind them.
	for time.Since(down) < outage {
		alive(t, p, "while Kafka was unreachable")
		txn := fmt.Sprintf("first-t%d", n)
		keys := make([]string, 10)
		b := &pgx.Batch{}
		for i := range keys {
			keys[i] = fmt.Sprintf("%s-r%d", txn, i)
			b.Queue(fmt.Sprintf(`INSERT INTO %s (idempotency_key, topic, payload) VALUES ($1, $2, '{"data": "first"}')`, f.Table), keys[i], other.Topic)
			expected = append(expected, verify.Expected{Key: keys[i], Txn: txn, Index: i})
		}
		tx, err := f.Pool.Begin(ctx)
		if err == nil {
			err = tx.SendBatch(ctx, b).Close()
		}
		if err == nil {
			err = tx.Commit(ctx)
		}
		if err != nil {
			t.Fatalf("write %s: %v", txn, err)
		}
		n++
		time.Sleep(100 * time.Millisecond)
	}
	if logCount(p, "cannot read the topic's max.message.bytes") == 0 {
		t.Fatalf("walpost never failed to read the new topic's max.message.bytes: the outage did not meet the topic's first event\n%s", tail(p.log, 20))
	}
	proxy.Restore()
	t.Logf("Kafka back after %s; %d events for %s committed meanwhile", time.Since(down).Round(time.Second), len(expected), other.Topic)
	verifyDelivery(t, &other, expected, 3*time.Minute)
	alive(t, p, "after Kafka returned")
	if n := logCount(p, "session failed"); n != 0 {
		t.Errorf("%d session restarts while Kafka was down at a topic's first event, want 0:\n%s", n, tail(p.log, 30))
	}
	var poisoned int
	if err := f.Pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*) FROM %s`, f.PoisonTable)).Scan(&poisoned); err != nil {
		t.Fatal(err)
	}
	if poisoned != 0 {
		t.Errorf("%d events quarantined during a Kafka outage, want 0", poisoned)
	}
}
