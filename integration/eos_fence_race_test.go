package integration

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestExactlyOnceFencedWhileHoldingSlot: two walposts race for a free
// slot; the loser has already run InitProducerID (fencing the winner's
// producer) when START_REPLICATION tells it the slot is taken, and stands
// by. Here the loser's InitProducerID is made by a client of the test
// with the slot's transactional id while walpost streams under 4 writers.
// The walpost that holds the slot must not exit: it initialises its
// producer again, resumes from the checkpoint, and read_committed sees
// each event once. Before the fix it exited 1 (kafka.ErrFenced is
// terminal).
func TestExactlyOnceFencedWhileHoldingSlot(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 3})
	p := f.start(f.exactlyOnceEnv()...)
	waitStreaming(t, p)
	l := newWriterLoad(f, 4, 20, 20*time.Millisecond).start()
	l.waitWritten(t, 2000, time.Minute)

	var sysid int64
	if err := f.Pool.QueryRow(context.Background(), `SELECT system_identifier FROM pg_control_system()`).Scan(&sysid); err != nil {
		t.Fatal(err)
	}
	txid := "walpost-" + f.Slot + "-" + strconv.FormatInt(sysid, 10)
	loser, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(txid))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	if _, _, err := loser.ProducerID(ctx); err != nil {
		t.Fatalf("InitProducerID as %s: %v", txid, err)
	}
	cancel()
	loser.Close()
	t.Logf("fenced %s while walpost held the slot", txid)

	// The fence ends the session (PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH
	// on brokers that bump the epoch per transaction): a new one starts.
	waitFor(t, time.Minute, "walpost to start a new session after the fence", func() bool {
		return logCount(p, "msg=streaming") > 1 || p.exited()
	})
	alive(t, p, "after another producer initialised its transactional id")
	t.Logf("sessions ended by the fence: %d (fenced while holding the slot), %d (reconnecting)",
		logCount(p, "kafka fenced this producer while this walpost held the slot"), logCount(p, "session failed; reconnecting"))
	waitTotal(t, l, 6000)
	expected := l.finish(t)
	verifyReadCommitted(t, f, expected, 2*time.Minute)
	alive(t, p, "at the end")
}
