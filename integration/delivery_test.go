package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/verify"
)

// load writes events from concurrent writers in transactions of 1..maxTxn
// rows until total events are committed or ctx ends.
type load struct {
	f        *fixture
	writers  int
	maxTxn   int
	total    int64
	payload  string
	pause    time.Duration // between transactions of one writer
	mu       sync.Mutex
	expected []verify.Expected
	written  atomic.Int64
	wg       sync.WaitGroup
	errs     chan error
}

func newLoad(f *fixture, writers, maxTxn int, total int64) *load {
	return &load{f: f, writers: writers, maxTxn: maxTxn, total: total, errs: make(chan error, writers),
		payload: `{"data": "` + strings.Repeat("x", 150) + `"}`}
}

func (l *load) start(ctx context.Context) {
	var claimed atomic.Int64
	for w := 0; w < l.writers; w++ {
		l.wg.Add(1)
		go func(w int) {
			defer l.wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for t := 0; ctx.Err() == nil; t++ {
				n := int64(1 + rng.IntN(l.maxTxn))
				start := claimed.Add(n) - n
				if start >= l.total {
					return
				}
				n = min(n, l.total-start)
				keys := make([]string, n)
				for i := range keys {
					keys[i] = fmt.Sprintf("w%d-t%d-r%d", w, t, i)
				}
				exp, err := l.f.writeTxn(ctx, fmt.Sprintf("w%d-t%d", w, t), keys, l.payload)
				if err != nil {
					if ctx.Err() == nil {
						l.errs <- err
					}
					return
				}
				l.mu.Lock()
				l.expected = append(l.expected, exp...)
				l.mu.Unlock()
				l.written.Add(n)
				if l.pause > 0 {
					time.Sleep(l.pause)
				}
			}
		}(w)
	}
}

// wait waits for the writers and fails the test on a write error.
func (l *load) wait(t testing.TB) []verify.Expected {
	t.Helper()
	l.wg.Wait()
	select {
	case err := <-l.errs:
		t.Fatalf("writer: %v", err)
	default:
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]verify.Expected(nil), l.expected...)
}

// TestDeliveryConcurrentWriters: 8 writers, transactions of 1–100 rows,
// 50,000 events: each delivered exactly once, per partition in commit
// order and in insert order within a transaction.
func TestDeliveryConcurrentWriters(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 4})
	p := f.start()
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not start streaming")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	l := newLoad(f, 8, 100, 50_000)
	l.start(ctx)
	expected := l.wait(t)
	recs := f.consumeAll(t, len(expected), 3*time.Minute)
	rep := verify.Validate(expected, observed(recs))
	t.Logf("validator: %s", rep)
	if !rep.OK() || rep.Duplicates() != 0 || rep.Delivered != 50_000 {
		t.Fatalf("delivery failed: %s", rep)
	}
}

// TestBigTransaction: one transaction of 100,000 rows is delivered while
// walpost's RSS stays under 150 MiB.
func TestBigTransaction(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 3})
	p := f.start()
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not start streaming")
	}
	peak, stopSampling := watchRSS(t, p)
	const n = 100_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("big-%06d", i)
	}
	ctx := context.Background()
	payload := `{"data": "` + strings.Repeat("y", 180) + `"}`
	expected, err := f.writeTxn(ctx, "big", keys, payload)
	if err != nil {
		t.Fatal(err)
	}
	recs := f.consumeAll(t, n, 3*time.Minute)
	stopSampling()
	rep := verify.Validate(expected, observed(recs))
	t.Logf("validator: %s; peak RSS %d KiB", rep, peak())
	if !rep.OK() || rep.Delivered != n {
		t.Fatalf("big transaction: %s", rep)
	}
	if peak() == 0 || peak() > 150*1024 {
		t.Fatalf("peak RSS %d KiB, want > 0 and ≤ 150 MiB", peak())
	}
}

var stoppedRE = regexp.MustCompile(`msg="replication stopped" slot=\S+ lsn=(\S+)`)

// TestSIGTERMMidStream: SIGTERM while writers run: exit within
// kafka.flush_timeout (30 s) and a margin, with the slot confirmed at the end of the last fully acked transaction; a restart
// delivers the rest with zero duplicates and nothing lost.
func TestSIGTERMMidStream(t *testing.T) {
	f := newFixture(t, fixtureOpts{partitions: 3})
	p := f.start()
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not start streaming")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	l := newLoad(f, 4, 200, 40_000)
	l.start(ctx)
	waitFor(t, time.Minute, "some events written", func() bool { return l.written.Load() > 8_000 })
	// Shutdown reads to the end of the open transaction (200 events),
	// waits for the acks (at most kafka.flush_timeout, 30 s) and confirms.
	took, err := p.signal(syscall.SIGTERM, 45*time.Second)
	if err != nil {
		t.Fatalf("after SIGTERM: %v (after %s)", err, took)
	}
	t.Logf("walpost exited %s after SIGTERM", took.Round(time.Millisecond))
	log, _ := os.ReadFile(p.log)
	m := stoppedRE.FindSubmatch(log)
	if m == nil {
		t.Fatal("no 'replication stopped' line in the log")
	}
	final, _ := pglogrepl.ParseLSN(string(m[1]))
	waitFor(t, 30*time.Second, "slot inactive", func() bool { _, active, _ := f.slotState(); return !active })
	confirmed, _, _ := f.slotState()
	if confirmed != final {
		t.Fatalf("slot confirmed %s, walpost's final watermark %s", confirmed, final)
	}
	p2 := f.start()
	if !p2.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("restarted walpost did not stream")
	}
	expected := l.wait(t)
	recs := f.consumeAll(t, len(expected), 3*time.Minute)
	rep := verify.Validate(expected, observed(recs))
	t.Logf("validator: %s", rep)
	if !rep.OK() || rep.Duplicates() != 0 {
		t.Fatalf("after SIGTERM and restart: %s", rep)
	}
}

// TestKill9MidStream: kill -9 while writers run, restart: nothing lost, and
// every duplicate belongs to a transaction at or after the slot's confirmed
// position at the time of the kill.
func TestKill9MidStream(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 3})
	p := f.start()
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not start streaming")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	l := newLoad(f, 4, 200, 40_000)
	l.start(ctx)
	waitFor(t, time.Minute, "some events written", func() bool { return l.written.Load() > 10_000 })
	if _, err := p.signal(syscall.SIGKILL, 10*time.Second); err == nil {
		t.Fatal("walpost exited cleanly after SIGKILL?")
	}
	waitFor(t, 15*time.Second, "slot inactive", func() bool { _, active, _ := f.slotState(); return !active })
	atKill, _, _ := f.slotState()
	p2 := f.start()
	if !p2.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("restarted walpost did not stream")
	}
	expected := l.wait(t)
	recs := f.consumeAll(t, len(expected), 3*time.Minute)
	rep := verify.Validate(expected, observed(recs))
	t.Logf("validator: %s; slot confirmed at kill %s", rep, atKill)
	if !rep.OK() {
		t.Fatalf("after kill -9 and restart: %s", rep)
	}
	seen := map[string]bool{}
	for _, r := range recs {
		if seen[r.Key] && r.CommitLSN < atKill {
			t.Fatalf("duplicate %s from commit %s, before the confirmed position %s at the kill", r.Key, r.CommitLSN, atKill)
		}
		seen[r.Key] = true
	}
}

// TestQuietOutboxBusyOtherTable: with no outbox writes and a busy other
// table, the slot's confirmed position catches up with the server's WAL
// within a minute, so the slot does not pin WAL.
func TestQuietOutboxBusyOtherTable(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1})
	other := randName("busy")
	mustExec(t, f.Pool, fmt.Sprintf(`CREATE TABLE %s (id serial PRIMARY KEY, v text)`, other))
	t.Cleanup(func() { _, _ = f.Pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+other) })
	p := f.start()
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not start streaming")
	}
	// One outbox event first, so the slot has moved once.
	if _, err := f.writeTxn(context.Background(), "first", []string{"first"}, `{}`); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		mustExec(t, f.Pool, fmt.Sprintf(`INSERT INTO %s (v) SELECT md5(g::text) FROM generate_series(1, 200) g`, other))
	}
	target := f.currentWAL()
	start, _, _ := f.slotState()
	caught := time.Now()
	waitFor(t, time.Minute, fmt.Sprintf("slot confirmed ≥ %s (was %s)", target, start), func() bool {
		lsn, _, _ := f.slotState()
		return lsn >= target
	})
	t.Logf("slot confirmed ≥ %s after %s", target, time.Since(caught).Round(time.Millisecond))
}

// TestHotStandby: two instances on one slot: one forwards, the other waits;
// after kill -9 of the first, the second takes over within 30 s and
// nothing is lost.
func TestHotStandby(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 2})
	a := f.start()
	if !a.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("first walpost did not stream")
	}
	b := f.start()
	if !b.waitLog("standing by", 30*time.Second) {
		t.Fatal("second walpost did not stand by")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	l := newLoad(f, 2, 50, 10_000)
	l.pause = 5 * time.Millisecond
	l.start(ctx)
	waitFor(t, time.Minute, "some events written", func() bool { return l.written.Load() > 2_000 })
	if _, err := a.signal(syscall.SIGKILL, 10*time.Second); err == nil {
		t.Fatal("first walpost exited cleanly after SIGKILL?")
	}
	killed := time.Now()
	if !b.waitLog("msg=streaming", 30*time.Second) {
		t.Fatalf("standby did not take over within 30 s")
	}
	t.Logf("standby took over %s after the kill", time.Since(killed).Round(time.Millisecond))
	expected := l.wait(t)
	recs := f.consumeAll(t, len(expected), 3*time.Minute)
	rep := verify.Validate(expected, observed(recs))
	t.Logf("validator: %s", rep)
	if !rep.OK() {
		t.Fatalf("after hand-over: %s", rep)
	}
}
