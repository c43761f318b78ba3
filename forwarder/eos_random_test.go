package forwarder

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/replication/replicationtest"
	"github.com/walpost/walpost/sink/kafka"
)

// TestExactlyOnceRandomFaults (INV-8, INV-9, INV-10): two whole
// exactly-once walposts of one slot (Forwarders, one streaming, the other
// standing by) against the fake walsender and kfake, with transactions
// committed every few milliseconds, while faults come at random: the
// walsender's connection cut, the producer fenced by another of the
// slot's (the session initialises a new one and reads the checkpoint
// again), a commit (EndTxn) or a checkpoint's produce failing, a produce
// the broker applied but answered with REQUEST_TIMED_OUT, one of the two
// stopped and another started in its place (a restart, or a takeover by
// the one standing by: a new producer, nothing kept in memory, the
// checkpoint read afresh). A walpost that exits fenced because the other
// took the slot over is started again, as a supervisor would.
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

	// A backlog: the fake sends each event 1 s after its commit, so the
	// transactor commits by the interval (5 ms) and the size bound (7
	// records) only, the stream paused. Or (every other seed) a live
	// stream (the fake's default send time comes before every commit
	// time): it commits at each PostgreSQL transaction end while the
	// stream reads on, the interval (1 s) and 5,000 records hardly ever
	// reached.
	interval, records, lag := 5*time.Millisecond, 7, time.Second
	if rng.IntN(2) == 0 {
		interval, records, lag = time.Second, 5000, 0
	}
	t.Logf("delivery.transaction_interval %s, delivery.transaction_records %d, events sent %s after their commit (0: live)", interval, records, lag)

	k := newKafkaFake(t)
	trace := traceKafka(k)
	h := newSessionHarness(t, replicationtest.Config{SendLag: lag}, func(c *config.Config) {
		exactlyOnce(k)(c)
		c.Delivery.TransactionInterval = interval
		c.Delivery.TransactionRecords = records
		c.Kafka.FlushTimeout = time.Second // bounds a session's end after a fault
	})
	// Both walposts' lines from INFO (the Kafka client's from WARN) and
	// kfake's trace, kept to print when the test fails; EOS_FAULTS_LOG=1
	// prints the walposts' lines as they come instead.
	logs := &lockedBuffer{}
	logger := slog.New(quietKafka{Handler: slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})})
	if os.Getenv("EOS_FAULTS_LOG") != "" {
		logger = slog.New(quietKafka{Handler: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})})
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kfake's last transactional requests (time since the start):\n%s", trace)
			t.Logf("the walposts' lines (the Kafka client's from WARN):\n%s", logs)
		}
	})
	h.retryFirst = 10 * time.Millisecond
	// Two walposts of the slot, running all along: while one streams the
	// other stands by (it checks the slot before it initialises the
	// producer, and its START_REPLICATION is refused with 55006); when
	// the streaming one's session ends either may take the slot, and one
	// that initialised its producer but lost the race for the slot fences
	// the other and stands by in turn.
	walposts := [2]*instance{startInstance(t, h, logger, "a"), startInstance(t, h, logger, "b")}
	h.waitFlush(h.pg.Append(row(0)).End)
	exited := func() {
		t.Helper()
		for i, w := range walposts {
			if err, out := w.exited(); out {
				t.Fatalf("walpost %d: Run returned: %v", i, err)
			}
		}
	}

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
			for _, w := range walposts {
				if _, out := w.exited(); out {
					return true
				}
			}
			return h.pg.Starts() > starts && h.pg.Slot().ActivePID != 0
		})
		exited()
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
	var order []string
	hits := 0
	for range 20 {
		exited()
		time.Sleep(time.Duration(2+rng.IntN(20)) * time.Millisecond) // into the session, not a wait
		starts := h.pg.Starts()
		var pending *kfake.FaultHandle
		var name string
		ends := true
		switch rng.IntN(6) {
		case 0:
			h.pg.Disconnect()
			name = "walsender cut"
			faults[name]++
		case 1:
			h.transactional().Close() // fences the session's producer
			name = "fenced by another producer"
			faults[name]++
		case 2:
			pending = k.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.UnknownServerError})
			name = "EndTxn failed"
			faults[name]++
		case 3:
			pending = k.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: h.cfg.Kafka.CheckpointTopic, Err: kerr.UnknownServerError})
			name = "checkpoint produce failed"
			faults[name]++
		case 4:
			pending = k.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: harnessTopic, Err: kerr.RequestTimedOut})
			name = "produce applied, answered REQUEST_TIMED_OUT"
			faults[name]++
			ends = false // franz-go retries it; the broker has it once
		case 5:
			i := rng.IntN(2)
			if err := walposts[i].stopWait(10 * time.Second); err != nil {
				t.Fatalf("walpost %d: Run: %v, want nil after a stop", i, err)
			}
			walposts[i] = startInstance(t, h, logger, fmt.Sprintf("%c%d", "ab"[i], len(order)))
			name = "walpost stopped, another started"
			faults[name]++
			// The one stopped may have been standing by: then the
			// session that streams goes on, and no new one is due.
			ends = false
		}
		t.Logf("fault %d: %s (START_REPLICATIONs %d, slot held by %d)", len(order), name, starts, h.pg.Slot().ActivePID)
		order = append(order, name)
		if pending != nil {
			wctx, cancel := context.WithTimeout(h.ctx, 300*time.Millisecond)
			_ = pending.Wait(wctx, 1)
			cancel()
			pending.Remove()
			// A Kafka fault that met no request is taken back. One that
			// met a request ends the streaming session, which a new one
			// follows, unless it met the walpost standing by (its abort
			// as its session ended): a new session is waited for a
			// second, then one streaming.
			ends = false
			hits += pending.Hits()
			if pending.Hits() > 0 {
				wctx, cancel := context.WithTimeout(h.ctx, time.Second)
				_ = h.pg.Wait(wctx, "a new session after a Kafka fault", func() bool {
					return h.pg.Starts() > starts && h.pg.Slot().ActivePID != 0
				})
				cancel()
			}
		}
		switch {
		case ends:
			waitSession(starts, "a new session after the fault")
		default:
			// The fault may have met the other walpost's requests
			// (its abort as its session ended): a session streams.
			waitSession(-1, "a session streaming after the fault")
		}
	}
	stopWriters()
	wmu.Lock()
	end, n := last.End, rows
	wmu.Unlock()
	takeovers := walposts[0].fenced.Load() + walposts[1].fenced.Load()
	t.Logf("faults: %v; %d of the Kafka faults met a request; %d walposts exited fenced by a takeover and were started again", faults, hits, takeovers)
	if _, err := h.pg.WaitFlush(h.ctx, end); err != nil {
		exited()
		t.Fatalf("%v (confirmed at most %s, %d sessions)", err, h.pg.MaxFlush(), h.pg.Starts())
	}
	// Stopped, both, so nothing commits after the read's end is taken.
	for i, w := range walposts {
		w.stop()
		if err := w.stopWait(10 * time.Second); err != nil {
			t.Fatalf("walpost %d: Run: %v, want nil after a stop", i, err)
		}
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
	trace.mu.Lock()
	commits := trace.commits
	trace.mu.Unlock()
	t.Logf("%d events, %d sessions, %d Kafka commits asked: %d lost, %d more than once", n+1, h.pg.Starts(), commits, lost, twice)
}

// instance is one walpost process of a test: a Forwarder that, when Run
// ends because another walpost took the slot over (kafka.ErrFenced), is
// started again in its place as a supervisor would, and then stands by.
type instance struct {
	stop   context.CancelFunc
	done   chan error // Run's result other than a takeover
	fenced atomic.Int32
}

func startInstance(t *testing.T, h *sessionHarness, logger *slog.Logger, name string) *instance {
	t.Helper()
	if logger != nil {
		logger = logger.With("walpost", name)
	}
	ctx, stop := context.WithCancel(context.Background())
	w := &instance{stop: stop, done: make(chan error, 1)}
	go func() {
		for {
			f, err := New(h.cfg, Deps{Logger: logger})
			if err != nil {
				w.done <- err
				return
			}
			f.retryFirst = h.retryFirst
			err = f.Run(ctx)
			h.pg.SetSlot(func(*replicationtest.Slot) {}) // wakes a Wait on the server
			if ctx.Err() == nil && kafka.Fenced(err) {
				w.fenced.Add(1)
				continue
			}
			w.done <- err
			return
		}
	}()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-w.done:
			w.done <- err
		case <-time.After(30 * time.Second):
			t.Error("Run did not return within 30s of its context's end")
		}
	})
	return w
}

// exited returns Run's result if it returned.
func (w *instance) exited() (error, bool) {
	select {
	case err := <-w.done:
		w.done <- err
		return err, true
	default:
		return nil, false
	}
}

// stopWait stops the walpost and waits at most d for Run's result: nil,
// or kafka.ErrFenced when the other walpost took the slot over as this
// one stopped (its last commit then fails, and the other resumes from
// the checkpoint).
func (w *instance) stopWait(d time.Duration) error {
	w.stop()
	select {
	case err := <-w.done:
		w.done <- err
		if kafka.Fenced(err) {
			w.fenced.Add(1)
			return nil
		}
		return err
	case <-time.After(d):
		return fmt.Errorf("Run still running %s after its stop", d)
	}
}

// quietKafka passes the Kafka client's records (a logger With component
// kafka) only from WARN up.
type quietKafka struct {
	slog.Handler
	kafka bool
}

func (q quietKafka) Enabled(ctx context.Context, l slog.Level) bool {
	return (!q.kafka || l >= slog.LevelWarn) && q.Handler.Enabled(ctx, l)
}

func (q quietKafka) WithAttrs(as []slog.Attr) slog.Handler {
	k := q.kafka
	for _, a := range as {
		k = k || (a.Key == "component" && a.Value.String() == "kafka")
	}
	return quietKafka{Handler: q.Handler.WithAttrs(as), kafka: k}
}

func (q quietKafka) WithGroup(name string) slog.Handler {
	return quietKafka{Handler: q.Handler.WithGroup(name), kafka: q.kafka}
}

// kafkaTrace keeps the last requests of the transactional protocol kfake
// received (InitProducerID, Produce, EndTxn), to print when the test
// finds an event lost or committed twice: which producer epoch wrote what
// and which commit or abort ended it. Control functions that only look.
type kafkaTrace struct {
	mu      sync.Mutex
	start   time.Time
	lines   []string
	commits int // EndTxns that asked for a commit
}

const traceLines = 3000

func traceKafka(k *kafkaFake) *kafkaTrace {
	tr := &kafkaTrace{start: time.Now()}
	look := func(req kmsg.Request) (kmsg.Response, error, bool) {
		switch r := req.(type) {
		case *kmsg.InitProducerIDRequest:
			id := ""
			if r.TransactionalID != nil {
				id = *r.TransactionalID
			}
			tr.add("InitProducerID %s pid=%d epoch=%d", id, r.ProducerID, r.ProducerEpoch)
		case *kmsg.EndTxnRequest:
			tr.add("EndTxn pid=%d epoch=%d commit=%v", r.ProducerID, r.ProducerEpoch, r.Commit)
			if r.Commit {
				tr.mu.Lock()
				tr.commits++
				tr.mu.Unlock()
			}
		case *kmsg.ProduceRequest:
			for _, rt := range r.Topics {
				for _, rp := range rt.Partitions {
					var batch kmsg.RecordBatch
					if err := batch.ReadFrom(rp.Records); err != nil {
						continue
					}
					recs, _ := kfake.BatchRecords(batch)
					keys := make([]string, 0, len(recs))
					for _, rec := range recs {
						keys = append(keys, string(rec.Key))
					}
					tr.add("Produce %s/%d pid=%d epoch=%d seq=%d keys=%v", rt.Topic, rp.Partition, batch.ProducerID, batch.ProducerEpoch, batch.FirstSequence, keys)
				}
			}
		}
		return nil, nil, false
	}
	for _, key := range []kmsg.Key{kmsg.InitProducerID, kmsg.EndTxn, kmsg.Produce} {
		k.ControlKey(int16(key), look)
	}
	return tr
}

func (tr *kafkaTrace) add(format string, args ...any) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.lines) == traceLines {
		tr.lines = tr.lines[1:]
	}
	tr.lines = append(tr.lines, fmt.Sprintf("%8.3fs ", time.Since(tr.start).Seconds())+fmt.Sprintf(format, args...))
}

func (tr *kafkaTrace) String() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return strings.Join(tr.lines, "\n")
}
