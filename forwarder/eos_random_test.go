package forwarder

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/replication/replicationtest"
)

// TestExactlyOnceRandomFaults (INV-8, INV-9, INV-10): a whole exactly-once
// Forwarder against the fake walsender and kfake, with transactions
// committed every few milliseconds, while faults come at random: the
// walsender's connection cut, the producer fenced by another of the
// slot's (the session initialises a new one and reads the checkpoint
// again), a commit (EndTxn) or a checkpoint's produce failing, a produce
// the broker applied but answered with REQUEST_TIMED_OUT, walpost stopped
// mid-session and another started in its place (a restart or a takeover:
// a new producer, nothing kept in memory, the checkpoint read afresh).
// Afterwards a read_committed reader finds every event once: none lost,
// none twice.
//
// The faults' order comes from a seed (logged; EOS_FAULTS_SEED repeats
// it), their timing from the scheduler.
func TestExactlyOnceRandomFaults(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("EOS_FAULTS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("EOS_FAULTS_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (EOS_FAULTS_SEED)", seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	k := newKafkaFake(t)
	h := newSessionHarness(t, replicationtest.Config{}, func(c *config.Config) {
		exactlyOnce(k)(c)
		c.Delivery.TransactionInterval = 5 * time.Millisecond
		c.Delivery.TransactionRecords = 7
		c.Kafka.FlushTimeout = time.Second // bounds a session's end after a fault
	})
	var logger *slog.Logger
	if os.Getenv("EOS_FAULTS_LOG") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	h.retryFirst = 10 * time.Millisecond
	h.run(Deps{Logger: logger})
	h.waitFlush(h.pg.Append(row(0)).End)

	// The writers: transactions of 1 to 4 rows, keys k1, k2, ..., until
	// the faults are done.
	var (
		wmu     sync.Mutex
		last    = h.pg.Append() // an empty transaction: its end is the WAL's
		rows    int
		stop    = make(chan struct{})
		stopped = make(chan struct{})
	)
	go func() {
		defer close(stopped)
		wrng := rand.New(rand.NewPCG(seed, 2))
		for n := 1; n <= 50_000; {
			select {
			case <-stop:
				return
			default:
			}
			var rs [][]replicationtest.Value
			for range 1 + wrng.IntN(4) {
				rs = append(rs, row(n))
				n++
			}
			tx := h.pg.Append(rs...)
			wmu.Lock()
			last, rows = tx, n-1
			wmu.Unlock()
			time.Sleep(time.Millisecond) // the writers' pace, not a wait
		}
	}()
	stopWriters := sync.OnceFunc(func() { close(stop); <-stopped })
	t.Cleanup(stopWriters)

	// waitSession waits for a session streaming after the first starts
	// START_REPLICATIONs, or fails the test when Run returned.
	waitSession := func(starts int, what string) {
		t.Helper()
		err := h.pg.Wait(h.ctx, what, func() bool {
			select {
			case <-h.exited:
				return true
			default:
			}
			return h.pg.Starts() > starts && h.pg.Slot().ActivePID != 0
		})
		select {
		case <-h.exited:
			t.Fatalf("Run returned: %v", h.result())
		default:
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	// The faults, one at a time, each a few milliseconds into a session
	// that streams. A fault that ends the session (the walsender cut, a
	// fence, a failed EndTxn or checkpoint produce that a request met)
	// is followed by a wait for the next session; a Kafka fault no
	// request met within 300 ms is taken back.
	faults := map[string]int{}
	hits := 0
	for range 20 {
		select {
		case <-h.exited:
			t.Fatalf("Run returned: %v", h.result())
		case <-time.After(time.Duration(2+rng.IntN(20)) * time.Millisecond): // into the session, not a wait
		}
		starts := h.pg.Starts()
		var pending *kfake.FaultHandle
		ends := true
		switch rng.IntN(6) {
		case 0:
			h.pg.Disconnect()
			faults["walsender cut"]++
		case 1:
			h.transactional().Close() // fences the session's producer
			faults["fenced by another producer"]++
		case 2:
			pending = k.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.UnknownServerError})
			faults["EndTxn failed"]++
		case 3:
			pending = k.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: h.cfg.Kafka.CheckpointTopic, Err: kerr.UnknownServerError})
			faults["checkpoint produce failed"]++
		case 4:
			pending = k.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: harnessTopic, Err: kerr.RequestTimedOut})
			faults["produce applied, answered REQUEST_TIMED_OUT"]++
			ends = false // franz-go retries it; the broker has it once
		case 5:
			h.stop()
			if err := h.waitExit(10 * time.Second); err != nil {
				t.Fatalf("Run: %v, want nil after a stop", err)
			}
			h.run(Deps{Logger: logger})
			faults["walpost stopped, another started"]++
		}
		if pending != nil {
			wctx, cancel := context.WithTimeout(h.ctx, 300*time.Millisecond)
			_ = pending.Wait(wctx, 1)
			cancel()
			pending.Remove()
			if pending.Hits() == 0 {
				ends = false
			}
			hits += pending.Hits()
		}
		if ends {
			waitSession(starts, "a new session after the fault")
		}
	}
	stopWriters()
	wmu.Lock()
	end, n := last.End, rows
	wmu.Unlock()
	t.Logf("faults: %v; %d of the Kafka faults met a request", faults, hits)
	if _, err := h.pg.WaitFlush(h.ctx, end); err != nil {
		select {
		case <-h.exited:
			t.Fatalf("Run returned: %v", h.result())
		default:
		}
		t.Fatalf("%v (confirmed at most %s, %d sessions)", err, h.pg.MaxFlush(), h.pg.Starts())
	}
	// Stopped, so nothing commits after the read's end is taken.
	h.stop()
	if err := h.waitExit(10 * time.Second); err != nil {
		t.Fatalf("Run: %v, want nil after a stop", err)
	}

	// Every committed record, read_committed.
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.ListenAddrs()...), kgo.ConsumeTopics(harnessTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords()) // the markers too: the last offset before the end is one

	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(h.ctx, harnessTopic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string][]int64{}
	read := map[int32]int64{}
	done := func() bool {
		ok := true
		ends.Each(func(o kadm.ListedOffset) { ok = ok && read[o.Partition] >= o.Offset })
		return ok
	}
	for !done() {
		fs := cl.PollFetches(h.ctx)
		if h.ctx.Err() != nil {
			t.Fatalf("read %v of %v", read, ends)
		}
		fs.EachRecord(func(r *kgo.Record) {
			read[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				seen[string(r.Key)] = append(seen[string(r.Key)], r.Offset)
			}
		})
	}
	lost, twice := 0, 0
	for i := 0; i <= n; i++ {
		key := fmt.Sprintf("k%d", i)
		switch offs := seen[key]; {
		case len(offs) == 0:
			lost++
			if lost <= 5 {
				t.Errorf("%s lost", key)
			}
		case len(offs) > 1:
			twice++
			if twice <= 5 {
				t.Errorf("%s committed %d times, at offsets %v", key, len(offs), offs)
			}
		}
	}
	t.Logf("%d events, %d sessions: %d lost, %d more than once", n+1, h.pg.Starts(), lost, twice)
}
