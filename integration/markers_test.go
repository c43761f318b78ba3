package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// TestExactlyOnceVisibleAtCommit: when kafka.Sink.CommitTxn returns, the
// transaction's records are visible to read_committed consumers: every
// partition's last stable offset is past them. EndTxn alone returns once
// the commit is decided, before the coordinator wrote the markers that
// make the records visible; walpost waits for those (DescribeTransactions)
// so that the next transaction's records do not reach a partition ahead
// of them, where the broker would hold them (transaction.version 2). 300
// back-to-back transactions of one record per partition, as a live
// stream commits them.
func TestExactlyOnceVisibleAtCommit(t *testing.T) {
	needStack(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	probe := newTxnProbe(t, ctx, "visible", 3)
	k, topic, adm := probe.k, probe.topic, probe.adm

	late := 0
	for i := range 300 {
		if err := k.BeginTxn(); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		last := map[int32]int64{}
		var failed error
		for p := range 3 {
			wg.Add(1)
			key := fmt.Sprintf("k-%d-%d", i, p)
			ev := &outbox.Event{ID: key, IdempotencyKey: key, Payload: []byte(`{}`), CreatedAt: "2026-12-03 08:00:00+00",
				CommitLSN: 0x100, CommitTime: time.Now()}
			k.Produce(ev, sink.AckFunc(func(r sink.Result, err error) {
				defer wg.Done()
				mu.Lock()
				defer mu.Unlock()
				if err != nil && failed == nil {
					failed = err
				}
				last[r.Partition] = max(last[r.Partition], r.Offset)
			}))
		}
		wg.Wait()
		if failed != nil {
			t.Fatalf("transaction %d: %v", i, failed)
		}
		if err := k.CommitTxn(ctx, kafka.TxnMark{Slot: "visible", SystemID: 1, LSN: 0x100}); err != nil {
			t.Fatalf("CommitTxn %d: %v", i, err)
		}
		stable, err := adm.ListCommittedOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		for p, off := range last {
			o, ok := stable.Lookup(topic, p)
			if !ok || o.Err != nil {
				t.Fatalf("last stable offset of %s/%d: %+v", topic, p, o)
			}
			if o.Offset <= off {
				late++
				break
			}
		}
	}
	if late > 0 {
		t.Fatalf("%d of 300 transactions were not yet visible to read_committed consumers when CommitTxn returned", late)
	}
}

// txnProbe is a transactional kafka.Sink on the stack's Kafka, its
// producer initialised, producing to a new topic with checkpoints in a new
// one-partition topic, and a plain client beside it; both closed with the
// test.
type txnProbe struct {
	k                     *kafka.Sink
	cl                    *kgo.Client
	adm                   *kadm.Client
	topic, cpTopic, txnID string
}

func newTxnProbe(t *testing.T, ctx context.Context, name string, partitions int32) *txnProbe {
	t.Helper()
	p := &txnProbe{topic: randName(name), cpTopic: randName(name + "_cp"), txnID: randName(name + "_txn")}
	createTopic(t, p.topic, partitions)
	createTopic(t, p.cpTopic, 1)
	k, err := kafka.New(kafka.Config{Brokers: brokers, DefaultTopic: p.topic, TransactionalID: p.txnID,
		TransactionTimeout: 30 * time.Second, CheckpointTopic: p.cpTopic})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	if err := k.InitProducer(ctx); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	p.k, p.cl, p.adm = k, cl, kadm.NewClient(cl)
	return p
}
