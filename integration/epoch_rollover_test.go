package integration

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// TestExactlyOnceEpochRollover: on Kafka 4 (transaction.version 2) every
// commit bumps the producer epoch, and when the epoch is used up (32,767)
// the coordinator gives the transactional id a new producer ID. At the
// default delivery.transaction_interval (100 ms) an exactly-once walpost
// meets that about once an hour. Commits go on across it, and the
// checkpoint read back (ReadCheckpoint, which pairs records with markers
// by producer ID) is the last one committed, before and after.
//
// About 33,000 transactions, two to three minutes: run with
// WALPOST_EPOCH_ROLLOVER=1.
func TestExactlyOnceEpochRollover(t *testing.T) {
	if os.Getenv("WALPOST_EPOCH_ROLLOVER") != "1" {
		t.Skip("about 33,000 Kafka transactions: WALPOST_EPOCH_ROLLOVER=1")
	}
	needStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	probe := newTxnProbe(t, ctx, "rollover", 1)
	k, cl, adm, cpTopic, txnID := probe.k, probe.cl, probe.adm, probe.cpTopic, probe.txnID
	describe := func() (int64, int16) {
		d, err := adm.DescribeTransactions(ctx, txnID)
		td, ok := d[txnID]
		if err != nil || !ok || td.Err != nil {
			t.Fatalf("describe %s: %v, in the answer %v, %v", txnID, err, ok, td.Err)
		}
		return td.ProducerID, td.ProducerEpoch
	}
	pid0, epoch0 := describe()
	t.Logf("producer ID %d, epoch %d", pid0, epoch0)
	key := kafka.TransactionalID("rollover", 1)
	commit := func(i int) {
		if err := k.BeginTxn(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		ev := &outbox.Event{ID: "e", IdempotencyKey: "e", Payload: []byte(`{}`), CreatedAt: "2026-12-03 08:00:00+00",
			CommitLSN: pglogrepl.LSN(i + 1), CommitTime: time.Now()}
		k.Produce(ev, sink.AckFunc(func(_ sink.Result, err error) { done <- err }))
		if err := <-done; err != nil {
			t.Fatalf("transaction %d: %v", i, err)
		}
		if err := k.CommitTxn(ctx, kafka.TxnMark{Slot: "rollover", SystemID: 1, LSN: pglogrepl.LSN(i + 1)}); err != nil {
			t.Fatalf("CommitTxn %d: %v", i, err)
		}
	}
	check := func(want int) {
		cp, found, err := kafka.ReadCheckpoint(ctx, cl, cpTopic, key)
		if err != nil || !found || cp.LSN != pglogrepl.LSN(want) {
			t.Fatalf("checkpoint after commit %d: %v found %v, err %v; want LSN %v", want, cp.LSN, found, err, pglogrepl.LSN(want))
		}
	}
	commit(0)
	check(1)
	_, epoch1 := describe()
	if epoch1 == epoch0 {
		t.Skipf("the epoch did not move at a commit (%d): transaction.version 1, no rollover to test", epoch1)
	}
	start := time.Now()
	i, rolled := 1, -1
	for ; i < 40000 && (rolled < 0 || i < rolled+50); i++ {
		commit(i)
		if i%1000 == 0 || (rolled < 0 && i > 32000) {
			pid, epoch := describe()
			if i%1000 == 0 {
				t.Logf("commit %d: producer ID %d, epoch %d (%.0f commits/s)", i, pid, epoch, float64(i)/time.Since(start).Seconds())
			}
			if pid != pid0 && rolled < 0 {
				rolled = i
				t.Logf("commit %d: producer ID %d → %d, epoch %d", i, pid0, pid, epoch)
				check(i + 1)
			}
		}
	}
	if rolled < 0 {
		t.Fatalf("no new producer ID after %d commits", i)
	}
	check(i)
}
