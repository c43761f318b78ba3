package integration

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/sink/kafka"
)

// sharedCheckpointTopic is kafka.checkpoint_topic's default, one partition
// shared by every exactly-once walpost of a Kafka cluster.
const sharedCheckpointTopic = "walpost_checkpoints"

// sharedEnv is the environment of an exactly-once walpost on f with the
// default checkpoint topic (created when missing, never deleted: other
// walposts may use it).
func (f *fixture) sharedEnv(extra ...string) []string {
	return append([]string{
		"WALPOST_DELIVERY_MODE=exactly-once",
		"WALPOST_KAFKA_CREATE_TOPIC_PARTITIONS=" + fmt.Sprint(f.Partitions),
	}, extra...)
}

// TestExactlyOnceSharedCheckpointTopic (correctness review, finding 5):
// two exactly-once walposts, W1 and W2 (two slots), share the default
// checkpoint topic. W2 is frozen (SIGSTOP) while its Kafka transaction
// holds its checkpoint record in that topic's partition without a marker,
// which pins the partition's last stable offset. W1 forwards a 20,000-row
// transaction, is killed (SIGKILL) after part of it committed, with
// checkpoints above the pinned offset, and restarts while W2 is still
// frozen: it resumes from its newest checkpoint, inside the large
// transaction, not from one below W2's record, and read_committed consumers
// of its topic see every event once. Then W2 runs again and its topic is
// checked too.
func TestExactlyOnceSharedCheckpointTopic(t *testing.T) {
	t.Parallel()
	f1 := newFixture(t, fixtureOpts{partitions: 3})
	f2 := newFixture(t, fixtureOpts{partitions: 3})
	// W1: small Kafka transactions, so the large PostgreSQL transaction
	// spans several. W2: one event per Kafka transaction, so under a steady
	// load it is often between its checkpoint record and its commit, and
	// a transaction timeout the test does not reach.
	env1 := f1.sharedEnv("WALPOST_DELIVERY_TRANSACTION_RECORDS=500")
	env2 := f2.sharedEnv("WALPOST_DELIVERY_TRANSACTION_RECORDS=1", "WALPOST_DELIVERY_TRANSACTION_TIMEOUT=5m")
	w1 := f1.start(env1...)
	w2 := f2.start(env2...)
	waitStreaming(t, w1)
	waitStreaming(t, w2)
	txn2 := kafka.TransactionalID(f2.Slot, systemID(t, f2))

	// W1 commits checkpoints before the freeze as well.
	l1 := newWriterLoad(f1, 4, 20, 2*time.Millisecond).start()
	l2 := newWriterLoad(f2, 1, 2, 5*time.Millisecond).start()
	l1.waitWritten(t, 2000, time.Minute)
	expected1 := l1.finish(t)
	waitFor(t, time.Minute, "W1's events committed in Kafka", func() bool {
		return f1.countKeys(t, "w", kgo.FetchIsolationLevel(kgo.ReadCommitted())) == len(expected1)
	})
	base := f1.endOffsets(t)
	l2.waitWritten(t, 50, time.Minute)

	// Whatever happens, W2 ends its transaction before the test ends: the
	// partition is shared.
	t.Cleanup(func() {
		_ = w2.cmd.Process.Signal(syscall.SIGCONT)
		_, _ = w2.signal(syscall.SIGTERM, 30*time.Second)
	})
	pin := freezeHoldingCheckpoint(t, f2, w2, txn2)
	expected2 := l2.finish(t)

	const big = 20_000
	keys := make([]string, big)
	for i := range keys {
		keys[i] = fmt.Sprintf("big-%05d", i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bigExp, err := f1.writeTxn(ctx, "big", keys, `{"data": "`+strings.Repeat("y", 150)+`"}`)
	if err != nil {
		t.Fatal(err)
	}
	// Kill W1 once a Kafka transaction of the large transaction committed
	// (the read_committed end of its quiet topic moved past base): its
	// checkpoint names the large transaction as partial.
	waitForFast(t, 2*time.Minute, "a Kafka transaction of the large transaction committed", func() bool { return f1.stableOffsets(t) > base })
	if _, err := w1.signal(syscall.SIGKILL, 10*time.Second); err == nil {
		t.Fatal("W1 exited cleanly after SIGKILL?")
	}
	committed := f1.countKeys(t, "big-", kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	t.Logf("W1 killed with %d of the %d rows of the large transaction committed", committed, big)
	if committed == 0 || committed >= big {
		t.Fatalf("W1 was killed with %d of the %d rows of the large transaction committed; the kill must land after part of it and before all of it committed", committed, big)
	}
	// W1's newer checkpoints are above the offset W2 pins.
	stillPinned(t, f2, txn2, pin)
	if end := checkpointEnd(t, f2); end <= pin+1 {
		t.Fatalf("the checkpoint partition ends at %d: nothing above W2's open checkpoint record at %d", end, pin)
	}

	waitFor(t, 30*time.Second, "W1's slot inactive", func() bool { _, active, _ := f1.slotState(); return !active })
	w1b := f1.start(env1...)
	waitStreaming(t, w1b)
	cp := checkpointReads(t, w1b)[0]
	t.Logf("W1 restarted from: %s", cp.Line)
	stillPinned(t, f2, txn2, pin) // the read above was behind W2's open transaction
	if cp.Partial == 0 || cp.Ordinal < committed || cp.Ordinal >= big {
		t.Errorf("W1 resumed from partial_commit_lsn %s ordinal %d; want the large transaction as partial, ordinal in [%d, %d) (%d of its rows committed)",
			cp.Partial, cp.Ordinal, committed, big, committed)
	}
	verifyReadCommitted(t, f1, append(expected1, bigExp...), 4*time.Minute)
	alive(t, w1b, "after its restart")

	if err := w2.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	verifyReadCommitted(t, f2, expected2, 4*time.Minute)
	alive(t, w2, "after it was frozen")
}

// systemID is the PostgreSQL cluster's system identifier.
func systemID(t testing.TB, f *fixture) int64 {
	t.Helper()
	var id int64
	if err := f.Pool.QueryRow(context.Background(), `SELECT system_identifier FROM pg_control_system()`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// freezeHoldingCheckpoint stops p (SIGSTOP) at a moment the Kafka
// transaction of txnID holds its checkpoint record in the shared
// checkpoint partition without a marker (between CommitTxn's produce and
// its EndTxn), and returns the offset where that transaction begins
// there: the partition's last stable offset stays at or below it while p
// is frozen. Otherwise it lets p run again until it wrote to the
// partition once more, and retries.
func freezeHoldingCheckpoint(t testing.TB, f *fixture, p *proc, txnID string) int64 {
	t.Helper()
	end := checkpointEnd(t, f)
	for attempt := 1; ; attempt++ {
		waitForFast(t, time.Minute, txnID+" writing to "+sharedCheckpointTopic, func() bool { return checkpointEnd(t, f) > end })
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		// Twice, a second apart: an EndTxn sent just before the stop
		// completes by then (on three brokers the coordinator still
		// shows the transaction Ongoing while its PrepareCommit is
		// being replicated, which can span two quick looks).
		if off, ok := checkpointPin(t, f, txnID); ok {
			time.Sleep(time.Second)
			if again, ok := checkpointPin(t, f, txnID); ok && again == off {
				t.Logf("%s frozen (attempt %d) holding its checkpoint record at offset %d of %s, without a marker", txnID, attempt, off, sharedCheckpointTopic)
				return off
			}
		}
		end = checkpointEnd(t, f)
		if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if attempt == 1000 {
			t.Fatalf("%s was never frozen inside its commit in %d attempts", txnID, attempt)
		}
	}
}

// checkpointPin says whether the transaction of txnID is open with a
// record in the checkpoint partition, and the offset where that
// transaction begins there, with the partition's last stable offset at or
// below it.
func checkpointPin(t testing.TB, f *fixture, txnID string) (int64, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dts, err := f.Admin.DescribeTransactions(ctx, txnID)
	if err != nil {
		t.Fatalf("describe transaction %s: %v", txnID, err)
	}
	dt, ok := dts[txnID]
	if !ok || dt.Err != nil || dt.State != "Ongoing" || !dt.Topics.Lookup(sharedCheckpointTopic, 0) {
		return 0, false
	}
	dps, err := f.Admin.DescribeProducers(ctx, kadm.TopicsSet{sharedCheckpointTopic: {0: {}}})
	if err != nil {
		t.Fatalf("describe the producers of %s: %v", sharedCheckpointTopic, err)
	}
	dp, ok := dps[sharedCheckpointTopic].Partitions[0].ActiveProducers[dt.ProducerID]
	if !ok || dp.CurrentTxnStartOffset < 0 {
		return 0, false
	}
	lso, err := f.Admin.ListCommittedOffsets(ctx, sharedCheckpointTopic)
	if err != nil {
		t.Fatalf("list the last stable offset of %s: %v", sharedCheckpointTopic, err)
	}
	if o, ok := lso.Lookup(sharedCheckpointTopic, 0); !ok || o.Err != nil || o.Offset > dp.CurrentTxnStartOffset {
		return 0, false
	}
	return dp.CurrentTxnStartOffset, true
}

// stillPinned fails the test unless txnID's transaction is still open with
// its checkpoint record at pin.
func stillPinned(t testing.TB, f *fixture, txnID string, pin int64) {
	t.Helper()
	// A coordinator or partition leader busy with other transactions
	// answers with a retriable error now and then: look again for 10 s
	// before concluding the transaction ended.
	var off int64
	var ok bool
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if off, ok = checkpointPin(t, f, txnID); ok && off == pin {
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Fatalf("%s no longer holds the checkpoint partition's last stable offset at %d (open: %v, at %d)", txnID, pin, ok, off)
}

// checkpointEnd is the end offset of the shared checkpoint partition.
func checkpointEnd(t testing.TB, f *fixture) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offs, err := f.Admin.ListEndOffsets(ctx, sharedCheckpointTopic)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := offs.Lookup(sharedCheckpointTopic, 0)
	if !ok || o.Err != nil {
		t.Fatalf("end offset of %s: %v", sharedCheckpointTopic, o.Err)
	}
	return o.Offset
}
