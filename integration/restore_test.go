package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRestoredServerLosesNothing: PostgreSQL comes back at an earlier WAL
// point on the same system identifier and timeline (a copy of its stopped
// data directory put back, as a VM or volume snapshot restore does), so
// the slot and walpost_position go back while Kafka, and the exactly-once
// checkpoint topic, keep what was sent after the copy. The transactions
// the restored server writes then reuse the LSNs of those sent before:
// none of them may be skipped, in either delivery mode. An at-least-once
// and an exactly-once walpost run side by side on their own slots.
//
// It stops and restores a PostgreSQL cluster of its own.
func TestRestoredServerLosesNothing(t *testing.T) {
	t.Parallel()
	alo := ownFixture(t, 3)
	eos := newFixture(t, fixtureOpts{partitions: 3, server: alo.Server})
	data := alo.Server.data
	exactlyOnceEnv := eos.exactlyOnceEnv("WALPOST_DELIVERY_TRANSACTION_RECORDS=200")
	readCommitted := kgo.FetchIsolationLevel(kgo.ReadCommitted())
	ctx := context.Background()

	write := func(prefix string, txns, rows int) {
		t.Helper()
		// Transaction by transaction in turn, so each slot's new events
		// take LSNs below and above the old checkpoint.
		for i := range txns {
			for _, f := range []*fixture{eos, alo} {
				keys := make([]string, rows)
				for j := range keys {
					keys[j] = fmt.Sprintf("%s-%d-%d", prefix, i, j)
				}
				if _, err := f.writeTxn(ctx, fmt.Sprintf("%s-%d", prefix, i), keys, `{"n":1}`); err != nil {
					t.Fatalf("write %s: %v", prefix, err)
				}
			}
		}
	}
	forwarded := func(prefix string, n int) {
		t.Helper()
		waitFor(t, 2*time.Minute, fmt.Sprintf("%d %s-* events in both topics", n, prefix), func() bool {
			return alo.countKeys(t, prefix+"-") >= n && eos.countKeys(t, prefix+"-", readCommitted) >= n
		})
	}
	startBoth := func() (*proc, *proc) {
		t.Helper()
		a, e := alo.start(), eos.start(exactlyOnceEnv...)
		waitStreaming(t, a)
		waitStreaming(t, e)
		return a, e
	}
	// restart stops the server (fast), runs between, and starts it; the
	// test's pools then drop every connection from before, which the
	// shutdown ended, so the next write cannot meet one.
	restart := func(between func()) {
		t.Helper()
		alo.pg(t, "pg-stop", "fast")
		between()
		alo.pg(t, "pg-start")
		alo.Pool.Reset()
		eos.Pool.Reset()
	}
	stopBoth := func(a, e *proc) {
		t.Helper()
		for _, p := range []*proc{a, e} {
			if _, err := p.signal(syscall.SIGTERM, time.Minute); err != nil {
				t.Fatalf("walpost did not stop: %v\n%s", err, tail(p.log, 30))
			}
		}
	}

	a, e := startBoth()
	write("before", 5, 40)
	forwarded("before", 200)
	stopBoth(a, e)

	// The copy: the slots and walpost_position as they are now.
	snap := filepath.Join(t.TempDir(), "data")
	restart(func() { copyDir(t, data, snap) })

	// Sent after the copy: Kafka and the checkpoint move past it.
	a, e = startBoth()
	write("old", 20, 50)
	forwarded("old", 1000)
	stopBoth(a, e)

	// Put the copy back: the WAL after it is gone, and the server writes
	// new transactions over the same LSNs, past the old checkpoint.
	restart(func() {
		if err := os.RemoveAll(data); err != nil {
			t.Fatal(err)
		}
		copyDir(t, snap, data)
	})
	write("new", 60, 50)
	a, e = startBoth()
	forwarded("new", 3000)

	// Exactly-once: each new event once for read_committed, and the
	// checkpoint was refused, not trusted.
	total, distinct := eos.countRecords(t, "new-", readCommitted)
	if total != 3000 || distinct != 3000 {
		t.Errorf("exactly-once: read_committed saw %d new-* records (%d distinct), want 3000 once each", total, distinct)
	}
	if b, _ := os.ReadFile(e.log); !strings.Contains(string(b), "the checkpoint is not used") && !strings.Contains(string(b), "the checkpoint does not match the server's WAL") {
		t.Errorf("exactly-once walpost did not refuse the checkpoint ahead of the restored server:\n%s", tail(e.log, 40))
	}
	alive(t, a, "after the restore")
	alive(t, e, "after the restore")
}

// copyDir copies a data directory with its owners and modes.
func copyDir(t testing.TB, from, to string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
		t.Fatalf("cp -a %s %s: %v\n%s", from, to, err, out)
	}
}

// countRecords counts the records whose key has prefix in f's topic, all
// and distinct, as a consumer of the given isolation sees them now: up to
// the end offsets listed first (the high watermarks; a read_committed
// consumer stops at the last stable offsets, and is done there once two
// polls in a row bring nothing). Not a quiet spell alone: under load a
// fetch can take longer than a poll, and the count came out short.
func (f *fixture) countRecords(t testing.TB, prefix string, opts ...kgo.Opt) (total, distinct int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	hw, err := f.Admin.ListEndOffsets(ctx, f.Topic)
	if err == nil {
		err = hw.Error()
	}
	var lso kadm.ListedOffsets
	if err == nil {
		if lso, err = f.Admin.ListCommittedOffsets(ctx, f.Topic); err == nil {
			err = lso.Error()
		}
	}
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(f.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50 * time.Millisecond),
		kgo.KeepControlRecords()}, opts...)...) // the markers too: a position passes them
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pos := map[int32]int64{}
	reached := func(ends kadm.ListedOffsets) bool {
		ok := true
		ends.Each(func(o kadm.ListedOffset) { ok = ok && pos[o.Partition] >= o.Offset })
		return ok
	}
	seen := map[string]bool{}
	deadline := time.Now().Add(time.Minute)
	for quiet := 0; !reached(hw) && quiet < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("counting %q records: at %v after a minute, high watermarks %v", prefix, pos, hw)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			pos[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() && strings.HasPrefix(string(r.Key), prefix) {
				total++
				seen[string(r.Key)] = true
			}
		})
		switch {
		case n == 0 && reached(lso):
			quiet++
		default:
			quiet = 0
		}
	}
	return total, len(seen)
}
