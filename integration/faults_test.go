package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/verify"
)

// Fault tests: the broker and PostgreSQL are stopped, restarted and cut off
// (through tcpProxy) while writers run. Each test checks with the
// validator that every committed event arrived, per-partition order held
// and nothing uncommitted was sent; duplicates are allowed (at-least-once).
// A test that stops or reconfigures PostgreSQL does it on a cluster of its
// own (ownFixture) and runs in parallel; one that stops the stack's broker
// or PostgreSQL (stackCtl) runs alone, and puts the stack back in
// t.Cleanup, also on failure.

// restoreStack makes sure Kafka and PostgreSQL run again when the test
// ends, whatever happened. Register it after newFixture, so it runs before
// the fixture's cleanup (which needs both).
func restoreStack(t testing.TB) {
	t.Helper()
	t.Cleanup(func() {
		for _, cmd := range []string{"pg-start", "kafka-start"} {
			if err := stackCtlErr(cmd); err != nil {
				t.Errorf("restoring the stack: %v", err)
			}
		}
	})
}

// stackFixture waits until both servers answer (another test of the
// package, or of a concurrent run on the same stack, may have stopped one),
// then creates the fixture and registers the stack's restoration.
func stackFixture(t testing.TB, partitions int) *fixture {
	t.Helper()
	needStack(t)
	deadline := time.Now().Add(2 * time.Minute)
	for stackCtlErr("status") != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the stack is not up: %v", stackCtlErr("status"))
		}
		time.Sleep(time.Second)
	}
	f := newFixture(t, fixtureOpts{partitions: partitions})
	restoreStack(t)
	return f
}

// ownFixture is a fixture on a PostgreSQL cluster of its own, for a
// test that stops, crashes or reconfigures PostgreSQL (f.pg) beside other
// tests.
func ownFixture(t testing.TB, partitions int) *fixture {
	t.Helper()
	needStack(t)
	return newFixture(t, fixtureOpts{partitions: partitions, private: true})
}

// pgProxy starts a proxy to the PostgreSQL of target (a URL) and
// returns it with the URL that goes through it.
func pgProxy(t testing.TB, target string) (*tcpProxy, string) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := newTCPProxy(t, "127.0.0.1:0", u.Host)
	u.Host = p.Addr()
	return p, u.String()
}

// kafkaProxy starts the proxy on the broker's PROXIED listener's
// advertised address and returns it with the seed broker that makes every
// connection of a client cross it. On three nodes its faults hit every
// node's proxy.
func kafkaProxy(t testing.TB) (*tcpProxy, string) {
	t.Helper()
	listener := os.Getenv("WALPOST_STACK_KAFKA_PROXIED_LISTENER")
	advertised := os.Getenv("WALPOST_STACK_KAFKA_PROXIED_ADVERTISED")
	if listener == "" || advertised == "" {
		t.Fatal("WALPOST_STACK_KAFKA_PROXIED_LISTENER / _ADVERTISED unset: source .stack/env of a current scripts/stack.sh up")
	}
	// The broker advertises one proxied address, so one test at a time
	// holds it; parallel tests queue here.
	kafkaProxyMu.Lock()
	t.Cleanup(kafkaProxyMu.Unlock)
	if os.Getenv("WALPOST_STACK_KAFKA_NODES") == "3" {
		// Three nodes: a proxy per node (clients learn the others from the
		// metadata), every fault applied to all of them, as to one broker.
		ps, seeds := clusterProxies(t)
		ps[0].peers = ps[1:]
		return ps[0], seeds[0]
	}
	return newTCPProxy(t, advertised, listener), advertised
}

// kafkaProxyMu is held by the test that owns the Kafka proxy (see
// kafkaProxy).
var kafkaProxyMu sync.Mutex

// throughProxy checks that walpost's traffic crosses proxy, so
// cutting it is a real fault.
func throughProxy(t testing.TB, proxy *tcpProxy) {
	t.Helper()
	if proxy.Bytes.Load() == 0 {
		t.Fatal("no traffic crossed the proxy: walpost bypasses it")
	}
}

// writerLoad is a load of concurrent writers that survives database faults:
// a transaction that fails is not retried (its keys are never reused) and
// counts as "maybe committed" (a failed COMMIT is ambiguous); finish
// settles each maybe transaction by looking for its rows.
type writerLoad struct {
	f       *fixture
	writers int
	maxTxn  int
	pause   time.Duration
	// randomPayload gives each transaction a random payload of this many
	// hex characters (0: a fixed, highly compressible payload).
	randomPayload int
	// seed draws the transaction sizes (0: a seed from the clock).
	seed uint64

	stop     atomic.Bool
	wg       sync.WaitGroup
	mu       sync.Mutex
	expected []verify.Expected
	maybe    [][]verify.Expected
	written  atomic.Int64 // committed events
	failed   atomic.Int64 // failed transactions
}

func newWriterLoad(f *fixture, writers, maxTxn int, pause time.Duration) *writerLoad {
	return &writerLoad{f: f, writers: writers, maxTxn: maxTxn, pause: pause}
}

func (l *writerLoad) start() *writerLoad {
	base := `{"data": "` + strings.Repeat("x", 150) + `"}`
	// Writer w draws from PCG(w, seed).
	seed := l.seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	l.f.t.Logf("fault load: %d writers, seed %d", l.writers, seed)
	for w := 0; w < l.writers; w++ {
		l.wg.Add(1)
		go func(w int) {
			defer l.wg.Done()
			rng := mrand.New(mrand.NewPCG(uint64(w), seed))
			for n := 0; !l.stop.Load(); n++ {
				size := 1 + rng.IntN(l.maxTxn)
				txn := fmt.Sprintf("w%d-t%d", w, n)
				keys := make([]string, size)
				for i := range keys {
					keys[i] = fmt.Sprintf("%s-r%d", txn, i)
				}
				payload := base
				if l.randomPayload > 0 {
					b := make([]byte, l.randomPayload/2)
					_, _ = rand.Read(b)
					payload = `{"data": "` + hex.EncodeToString(b) + `"}`
				}
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				exp, err := l.f.writeTxn(ctx, txn, keys, payload)
				cancel()
				if err != nil {
					maybe := make([]verify.Expected, size)
					for i, k := range keys {
						maybe[i] = verify.Expected{Key: k, Txn: txn, Index: i}
					}
					l.mu.Lock()
					l.maybe = append(l.maybe, maybe)
					l.mu.Unlock()
					l.failed.Add(1)
					time.Sleep(200 * time.Millisecond) // the database may be down
					continue
				}
				l.mu.Lock()
				l.expected = append(l.expected, exp...)
				l.mu.Unlock()
				l.written.Add(int64(size))
				if l.pause > 0 {
					time.Sleep(l.pause)
				}
			}
		}(w)
	}
	return l
}

// add records events committed outside the writers (e.g. a large
// transaction written beside them).
func (l *writerLoad) add(exp []verify.Expected) {
	l.mu.Lock()
	l.expected = append(l.expected, exp...)
	l.mu.Unlock()
	l.written.Add(int64(len(exp)))
}

// waitWritten waits until n more events than now are committed.
func (l *writerLoad) waitWritten(t testing.TB, n int64, timeout time.Duration) {
	t.Helper()
	target := l.written.Load() + n
	waitFor(t, timeout, fmt.Sprintf("%d events committed", target), func() bool { return l.written.Load() >= target })
}

// finish stops the writers and returns every committed event: those whose
// commit succeeded, plus the maybe transactions whose rows exist (a
// transaction is atomic: all its rows exist or none).
func (l *writerLoad) finish(t testing.TB) []verify.Expected {
	t.Helper()
	l.stop.Store(true)
	l.wg.Wait()
	l.mu.Lock()
	expected := append([]verify.Expected(nil), l.expected...)
	maybe := l.maybe
	l.mu.Unlock()
	if len(maybe) == 0 {
		return expected
	}
	var keys []string
	for _, txn := range maybe {
		for _, e := range txn {
			keys = append(keys, e.Key)
		}
	}
	present := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	for try := 0; try < 30; try++ { // PostgreSQL may still be coming up
		var rows []string
		rows, err = existingKeys(ctx, l.f, keys)
		if err == nil {
			for _, k := range rows {
				present[k] = true
			}
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		t.Fatalf("resolving maybe-committed transactions: %v", err)
	}
	committed := 0
	for _, txn := range maybe {
		n := 0
		for _, e := range txn {
			if present[e.Key] {
				n++
			}
		}
		switch n {
		case 0:
		case len(txn):
			committed++
			expected = append(expected, txn...)
		default:
			t.Errorf("transaction %s is partly in the table (%d of %d rows)", txn[0].Txn, n, len(txn))
		}
	}
	t.Logf("writers: %d events committed, %d transactions failed (%d of them committed after all)",
		len(expected), len(maybe), committed)
	return expected
}

func existingKeys(ctx context.Context, f *fixture, keys []string) ([]string, error) {
	rows, err := f.Pool.Query(ctx, fmt.Sprintf(`SELECT idempotency_key FROM %s WHERE idempotency_key = ANY($1)`, f.Table), keys)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// consumeExpected reads the fixture's topic from the start until every
// expected key has arrived and the topic has been quiet for 2 s, or
// timeout passes.
func consumeExpected(t testing.TB, f *fixture, expected []verify.Expected, timeout time.Duration) []verify.Observed {
	t.Helper()
	missing := make(map[string]bool, len(expected))
	for _, e := range expected {
		missing[e.Key] = true
	}
	var out []verify.Observed
	f.read(t, timeout, 2*time.Second, func(r *kgo.Record) {
		o := observe(r)
		delete(missing, o.Key)
		out = append(out, o)
	}, func() bool { return len(missing) == 0 })
	return out
}

// verifyDelivery consumes the topic and checks that every committed event
// arrived, in order per partition, and nothing else (no event of a
// transaction that did not commit). Duplicates are allowed.
func verifyDelivery(t testing.TB, f *fixture, expected []verify.Expected, timeout time.Duration) *verify.Report {
	t.Helper()
	start := time.Now()
	obs := consumeExpected(t, f, expected, timeout)
	rep := verify.Validate(expected, obs)
	t.Logf("validator (%s to consume): %s", time.Since(start).Round(time.Millisecond), rep)
	if !rep.OK() || rep.Unexpected != 0 {
		t.Errorf("delivery failed: %s", rep)
	}
	return rep
}

// alive fails the test when walpost exited.
func alive(t testing.TB, p *proc, when string) {
	t.Helper()
	if p.exited() {
		t.Fatalf("walpost exited %s (%v); it must recover by itself:\n%s", when, p.err, tail(p.log, 40))
	}
}

// logCount counts the occurrences of s in walpost's log.
func logCount(p *proc, s string) int {
	b, _ := os.ReadFile(p.log)
	return strings.Count(string(b), s)
}

// sleepAlive sleeps d, failing the test at once if walpost exits meanwhile.
func sleepAlive(t testing.TB, p *proc, d time.Duration, when string) {
	t.Helper()
	select {
	case <-p.done:
		alive(t, p, when)
	case <-time.After(d):
	}
}

func waitStreaming(t testing.TB, p *proc) {
	t.Helper()
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatalf("walpost did not start streaming:\n%s", tail(p.log, 30))
	}
}

// waitStreamingAgain waits until walpost logged "streaming" more than
// n times (it reconnected).
func waitStreamingAgain(t testing.TB, p *proc, n int, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, "walpost streaming again", func() bool {
		alive(t, p, "while reconnecting")
		return logCount(p, "msg=streaming") > n
	})
}

// arrives reads the fixture's topic from the start until a record
// with key arrives (true) or timeout passes (false). Unlike consumeExpected
// it does not wait for the topic to go quiet, so writers may go on.
func arrives(t testing.TB, f *fixture, key string, timeout time.Duration) bool {
	t.Helper()
	seen := false
	f.read(t, timeout, 0, func(r *kgo.Record) {
		seen = seen || string(r.Key) == key
	}, func() bool { return seen })
	return seen
}

// setWalSenderTimeout sets wal_sender_timeout server-wide until the test
// ends (then back to its default).
func setWalSenderTimeout(t testing.TB, f *fixture, v string) {
	t.Helper()
	mustExec(t, f.Pool, fmt.Sprintf(`ALTER SYSTEM SET wal_sender_timeout = '%s'`, v))
	t.Cleanup(func() {
		// This runs before stackFixture's restoration: bring PostgreSQL
		// back first if the test left it down.
		if err := f.pgErr("pg-start"); err != nil {
			t.Errorf("reset wal_sender_timeout: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := f.Pool.Exec(ctx, `ALTER SYSTEM RESET wal_sender_timeout`); err != nil {
			t.Errorf("reset wal_sender_timeout: %v", err)
		}
		_, _ = f.Pool.Exec(ctx, `SELECT pg_reload_conf()`)
	})
	mustExec(t, f.Pool, `SELECT pg_reload_conf()`)
}

// slotPID returns the walsender pid holding the fixture's slot (0
// when inactive).
func slotPID(f *fixture) int {
	var pid *int32
	_ = f.Pool.QueryRow(context.Background(), `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, f.Slot).Scan(&pid)
	if pid == nil {
		return 0
	}
	return int(*pid)
}

// TestBrokerDownLongerThanWalSenderTimeout: with wal_sender_timeout = 3s,
// Kafka is stopped for more than three of them while writers go on (more events than the
// in-flight limit, so the reader also pauses). walpost must keep its
// replication session alive with status updates (the same walsender holds
// the slot before and after), quarantine nothing (broker outages never
// poison), not exit, and deliver everything once the broker is back.
func TestBrokerDownLongerThanWalSenderTimeout(t *testing.T) {
	f := stackFixture(t, 3)
	// A short wal_sender_timeout, so the outage passes it three times
	// over in seconds (the property, not the clock, ends the outage).
	const senderTimeout = 3 * time.Second
	setWalSenderTimeout(t, f, senderTimeout.String())
	p := f.start("WALPOST_PIPELINE_MAX_INFLIGHT_EVENTS=2000", "WALPOST_POSTGRES_STATUS_INTERVAL=1s")
	waitStreaming(t, p)
	l := newWriterLoad(f, 2, 10, 25*time.Millisecond).start()
	l.waitWritten(t, 2000, time.Minute)
	pidBefore := slotPID(f)
	stackCtl(t, "kafka-stop")
	down := time.Now()
	atStop := l.written.Load()
	// The outage ends once the walsender that held the slot before it has
	// received a status update more than three wal_sender_timeouts after
	// Kafka went down, with more events written than the in-flight limit
	// (the reader paused behind unacknowledged events all that time).
	waitFor(t, 2*time.Minute, "a status update three wal_sender_timeouts into the outage, past the in-flight limit", func() bool {
		alive(t, p, "while Kafka was down")
		var reply *time.Time
		_ = f.Pool.QueryRow(context.Background(), `SELECT reply_time FROM pg_stat_replication WHERE pid = $1`, pidBefore).Scan(&reply)
		return reply != nil && reply.After(down.Add(3*senderTimeout)) && l.written.Load()-atStop > 3000
	})
	t.Logf("Kafka down for %s; %d events committed meanwhile", time.Since(down).Round(time.Second), l.written.Load()-atStop)
	pidDuring := slotPID(f)
	stackCtl(t, "kafka-start")
	t.Logf("Kafka back after %s", time.Since(down).Round(time.Second))
	l.waitWritten(t, 1000, time.Minute)
	expected := l.finish(t)
	verifyDelivery(t, f, expected, 3*time.Minute)
	alive(t, p, "after the broker outage")
	if pidBefore == 0 || pidDuring != pidBefore {
		t.Errorf("walsender holding the slot: pid %d before the outage, %d after it: the replication session did not survive (status updates must go on while Kafka is down)", pidBefore, pidDuring)
	}
	if n := logCount(p, "session failed"); n != 0 {
		t.Logf("walpost restarted its session %d times", n)
	}
	var poisoned int
	if err := f.Pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*) FROM %s`, f.PoisonTable)).Scan(&poisoned); err != nil {
		t.Fatal(err)
	}
	if poisoned != 0 {
		t.Errorf("%d events quarantined during a broker outage; broker outages never poison", poisoned)
	}
}

// TestPostgresRestartDuringLoad: PostgreSQL restarts (fast), then crashes
// (immediate stop) and starts again, while writers run. walpost reconnects
// by itself each time; every committed event arrives.
func TestPostgresRestartDuringLoad(t *testing.T) {
	t.Parallel()
	f := ownFixture(t, 3)
	p := f.start()
	waitStreaming(t, p)
	l := newWriterLoad(f, 4, 20, 5*time.Millisecond).start()
	l.waitWritten(t, 3000, time.Minute)

	f.pg(t, "pg-restart")
	t.Log("PostgreSQL restarted (fast)")
	waitStreamingAgain(t, p, 1, time.Minute)
	l.waitWritten(t, 3000, time.Minute)

	f.pg(t, "pg-stop", "immediate")
	t.Log("PostgreSQL stopped (immediate)")
	sleepAlive(t, p, 3*time.Second, "while PostgreSQL was down")
	f.pg(t, "pg-start")
	t.Log("PostgreSQL started")
	waitStreamingAgain(t, p, 2, time.Minute)
	l.waitWritten(t, 3000, time.Minute)

	expected := l.finish(t)
	verifyDelivery(t, f, expected, 3*time.Minute)
	alive(t, p, "after the PostgreSQL restarts")
}

// TestNetworkCutPostgres20s: every connection between walpost and
// PostgreSQL is cut for 20 s (and new ones refused) while writers run.
func TestNetworkCutPostgres20s(t *testing.T) {
	t.Parallel()
	f := stackFixture(t, 3)
	proxy, u := pgProxy(t, f.PGURL)
	p := f.start("WALPOST_POSTGRES_URL=" + u)
	waitStreaming(t, p)
	l := newWriterLoad(f, 4, 20, 10*time.Millisecond).start()
	l.waitWritten(t, 3000, time.Minute)
	throughProxy(t, proxy)
	proxy.Cut()
	sleepAlive(t, p, 20*time.Second, "while PostgreSQL was cut off")
	proxy.Restore()
	t.Log("network to PostgreSQL restored")
	waitStreamingAgain(t, p, 1, time.Minute)
	l.waitWritten(t, 3000, time.Minute)
	expected := l.finish(t)
	verifyDelivery(t, f, expected, 3*time.Minute)
	alive(t, p, "after the network cut")
}

// TestHalfOpenPostgresConnection: walpost's connections to PostgreSQL go
// silent without being closed (a dropped NAT entry, a server gone without
// a reset), while new connections work. With wal_sender_timeout = 8s the
// server drops its side and frees the slot after 8 s; walpost must notice
// its dead session by itself and forward again, without the network being
// healed. It runs with receive_timeout 6s, which walpost raises to
// wal_sender_timeout + 10 s = 18 s, and status_interval 2s: alone it
// forwards again some 19 s after the freeze; the test allows 90 s, for a
// machine busy with the other tests. The freeze comes as a position write
// sends its COMMIT, so the server also keeps that write's transaction and
// the position row's lock.
func TestHalfOpenPostgresConnection(t *testing.T) {
	t.Parallel()
	f := ownFixture(t, 3)
	setWalSenderTimeout(t, f, "8s")
	proxy, u := pgProxy(t, f.PGURL)
	p := f.start("WALPOST_POSTGRES_URL="+u, "WALPOST_POSTGRES_RECEIVE_TIMEOUT=6s", "WALPOST_POSTGRES_STATUS_INTERVAL=2s")
	waitStreaming(t, p)
	l := newWriterLoad(f, 2, 10, 20*time.Millisecond).start()
	l.waitWritten(t, 1000, time.Minute)
	throughProxy(t, proxy)
	// The freeze catches a position write between its UPDATE and its
	// COMMIT: the server keeps that transaction, and the row's lock, as
	// long as it does not notice the dead connection. The next session's
	// first position write must not wait behind it.
	select {
	case <-proxy.FreezeBefore(pgCommit):
	case <-time.After(30 * time.Second):
		t.Fatal("walpost wrote no position (no COMMIT on its connections) within 30s")
	}
	waitFor(t, 10*time.Second, "a walpost_position write idle in its transaction, waiting for the COMMIT the proxy holds", func() bool {
		var held int
		if err := f.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE state = 'idle in transaction' AND backend_xid IS NOT NULL AND query LIKE 'INSERT INTO walpost_position%'`).Scan(&held); err != nil {
			t.Fatal(err)
		}
		return held > 0
	})
	proxy.Freeze()
	frozen := time.Now()
	probe := fmt.Sprintf("probe-%d", frozen.UnixNano())
	if _, err := f.writeTxn(context.Background(), probe, []string{probe}, `{"probe": true}`); err != nil {
		t.Fatal(err)
	}
	// The effective receive timeout is wal_sender_timeout + 10 s (18 s);
	// a session start under load takes seconds more.
	arrived := arrives(t, f, probe, 90*time.Second)
	lsn, active, _ := f.slotState()
	if !arrived {
		started, failed := logCount(p, "msg=streaming"), logCount(p, "session failed")
		why := "walpost still sits on its dead replication connection"
		if failed > 0 && started <= failed {
			why = "walpost left its dead session, but the next one did not start streaming (see its steps in the log)"
		}
		t.Errorf("an event written after the freeze was not forwarded within %s: %s (sessions started %d, failed %d; slot %s active=%v)",
			time.Since(frozen).Round(time.Second), why, started, failed, lsn, active)
	} else {
		t.Logf("walpost forwarded again %s after the freeze", time.Since(frozen).Round(time.Second))
	}
	proxy.Restore()
	expected := append(l.finish(t), verify.Expected{Key: probe, Txn: probe})
	verifyDelivery(t, f, expected, 2*time.Minute)
	alive(t, p, "after the half-open connection")
}

// pgStopFast asks PostgreSQL for a fast shutdown and waits up to
// timeout (scripts/stack.sh pg-stop waits 60 s). It returns how long it
// took, or an error when the server was still up at the timeout; the
// shutdown then goes on.
func pgStopFast(timeout time.Duration) (time.Duration, error) {
	data, bin := os.Getenv("WALPOST_STACK_PGDATA"), os.Getenv("WALPOST_STACK_PG_BIN")
	args := []string{bin + "/pg_ctl", "-D", data, "stop", "-m", "fast", "-w", "-t", fmt.Sprint(int(timeout.Seconds()))}
	if os.Getuid() == 0 {
		args = append([]string{"runuser", "-u", "postgres", "--"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = "/"
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return time.Since(start), fmt.Errorf("%v: %s", err, out)
	}
	return time.Since(start), nil
}

// TestPostgresFastShutdownWhileKafkaUnreachable: a fast shutdown of
// PostgreSQL while walpost holds events Kafka has not acknowledged (Kafka
// unreachable) must complete within 20 s. A logical walsender exits at
// shutdown only once its client has confirmed everything sent; until then
// the server refuses every connection ("the database system is shutting
// down"). walpost must not hold the database hostage to a Kafka outage: it
// can drop the session (nothing is confirmed, nothing lost) when the
// server shuts down.
func TestPostgresFastShutdownWhileKafkaUnreachable(t *testing.T) {
	f := stackFixture(t, 3)
	if os.Getenv("WALPOST_STACK_PGDATA") == "" || os.Getenv("WALPOST_STACK_PG_BIN") == "" {
		t.Fatal("WALPOST_STACK_PGDATA / WALPOST_STACK_PG_BIN unset: source .stack/env")
	}
	proxy, seed := kafkaProxy(t)
	p := f.start("WALPOST_KAFKA_BROKERS=" + seed)
	waitStreaming(t, p)
	l := newWriterLoad(f, 2, 10, 20*time.Millisecond).start()
	l.waitWritten(t, 500, time.Minute)
	proxy.Cut()
	l.waitWritten(t, 500, time.Minute)
	expected := l.finish(t)
	took, err := pgStopFast(20 * time.Second)
	if err != nil {
		t.Errorf("fast shutdown with Kafka unreachable did not finish in %s (walsender waits for walpost's confirmation; sessions failed so far %d): %v",
			took.Round(time.Second), logCount(p, "session failed"), err)
		proxy.Restore()        // walpost confirms, the walsender exits, the shutdown ends
		stackCtl(t, "pg-stop") // waits for the end of the shutdown
	} else {
		t.Logf("fast shutdown took %s", took.Round(100*time.Millisecond))
		proxy.Restore()
	}
	stackCtl(t, "pg-start")
	verifyDelivery(t, f, expected, 3*time.Minute)
	alive(t, p, "after the PostgreSQL restart")
}

// TestNetworkCutKafka20s: every connection between walpost and Kafka is
// cut for 20 s (and new ones refused) while writers run.
func TestNetworkCutKafka20s(t *testing.T) {
	t.Parallel()
	f := stackFixture(t, 3)
	proxy, seed := kafkaProxy(t)
	p := f.start("WALPOST_KAFKA_BROKERS=" + seed)
	waitStreaming(t, p)
	l := newWriterLoad(f, 4, 20, 10*time.Millisecond).start()
	l.waitWritten(t, 3000, time.Minute)
	throughProxy(t, proxy)
	proxy.Cut()
	sleepAlive(t, p, 20*time.Second, "while Kafka was cut off")
	proxy.Restore()
	t.Log("network to Kafka restored")
	l.waitWritten(t, 3000, time.Minute)
	expected := l.finish(t)
	verifyDelivery(t, f, expected, 3*time.Minute)
	alive(t, p, "after the network cut")
	var poisoned int
	if err := f.Pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*) FROM %s`, f.PoisonTable)).Scan(&poisoned); err != nil {
		t.Fatal(err)
	}
	if poisoned != 0 {
		t.Errorf("%d events quarantined during a network cut; network faults never poison", poisoned)
	}
}

// TestStartWhileKafkaUnreachable: walpost started while no broker can be
// reached (the proxy refuses every connection for 15 s) waits and starts
// forwarding once Kafka is back, as it does when Kafka goes away while it
// runs; it must not exit.
func TestStartWhileKafkaUnreachable(t *testing.T) {
	t.Parallel()
	f := stackFixture(t, 3)
	proxy, seed := kafkaProxy(t)
	proxy.Cut()
	// The slot exists before the writers start (walpost would create it
	// only once it runs, and misses what is written before).
	mustExec(t, f.Pool, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, f.Slot)
	l := newWriterLoad(f, 2, 10, 10*time.Millisecond).start()
	p := f.start("WALPOST_KAFKA_BROKERS=" + seed)
	sleepAlive(t, p, 15*time.Second, "started while Kafka was unreachable")
	proxy.Restore()
	waitStreaming(t, p)
	l.waitWritten(t, 1000, time.Minute)
	expected := l.finish(t)
	verifyDelivery(t, f, expected, 2*time.Minute)
	alive(t, p, "after Kafka became reachable")
}

// TestStartWhilePostgresUnreachable: the same with PostgreSQL unreachable
// for 15 s at start.
func TestStartWhilePostgresUnreachable(t *testing.T) {
	t.Parallel()
	f := stackFixture(t, 3)
	proxy, u := pgProxy(t, f.PGURL)
	proxy.Cut()
	mustExec(t, f.Pool, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, f.Slot)
	l := newWriterLoad(f, 2, 10, 10*time.Millisecond).start()
	p := f.start("WALPOST_POSTGRES_URL=" + u)
	sleepAlive(t, p, 15*time.Second, "started while PostgreSQL was unreachable")
	proxy.Restore()
	// After 15 s of refused attempts the back-off (1 s doubling, jittered,
	// ≤ 30 s) may be ~16 s before the next one: a minute for it.
	restored := time.Now()
	waitStreamingAgain(t, p, 0, time.Minute)
	t.Logf("streaming %s after PostgreSQL became reachable", time.Since(restored).Round(time.Millisecond))
	l.waitWritten(t, 1000, time.Minute)
	expected := l.finish(t)
	verifyDelivery(t, f, expected, 2*time.Minute)
	alive(t, p, "after PostgreSQL became reachable")
}

// TestKafkaLatencyAndBandwidth: every Kafka connection crosses a link with
// 20 ms latency each way and 1 MiB/s per direction; writers with random
// payloads keep that link about full (lz4 halves hex), and everything
// arrives, in order.
func TestKafkaLatencyAndBandwidth(t *testing.T) {
	t.Parallel()
	f := stackFixture(t, 3)
	proxy, seed := kafkaProxy(t)
	proxy.SetLatency(20 * time.Millisecond)
	proxy.SetBandwidth(1 << 20)
	p := f.start("WALPOST_KAFKA_BROKERS=" + seed)
	waitStreaming(t, p)
	l := newWriterLoad(f, 4, 20, 5*time.Millisecond)
	l.randomPayload = 400
	l.start()
	sleepAlive(t, p, 15*time.Second, "under latency")
	expected := l.finish(t)
	t.Logf("%d events of ~%d bytes in 15 s", len(expected), l.randomPayload+12)
	start := time.Now()
	verifyDelivery(t, f, expected, 3*time.Minute)
	t.Logf("%d connections, %d bytes through the proxy; delivered %s after the writers stopped", proxy.accepted.Load(), proxy.Bytes.Load(), time.Since(start).Round(time.Millisecond))
	throughProxy(t, proxy)
	alive(t, p, "under latency")
}

// TestColumnAddedMidStream: a column added to the outbox while writers run
// (then rows that set it) neither stops walpost nor loses anything.
func TestColumnAddedMidStream(t *testing.T) {
	t.Parallel()
	f := stackFixture(t, 3)
	p := f.start()
	waitStreaming(t, p)
	l := newWriterLoad(f, 4, 20, 5*time.Millisecond).start()
	l.waitWritten(t, 2000, time.Minute)
	mustExec(t, f.Pool, fmt.Sprintf(`ALTER TABLE %s ADD COLUMN extra text`, f.Table))
	ctx := context.Background()
	var extra []verify.Expected
	for i := 0; i < 50; i++ {
		tx, err := f.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		txn := fmt.Sprintf("extra-%d", i)
		for j := 0; j < 3; j++ {
			key := fmt.Sprintf("%s-r%d", txn, j)
			if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload, extra) VALUES ($1, '{"extra": true}', $2)`, f.Table), key, "e"+key); err != nil {
				t.Fatal(err)
			}
			extra = append(extra, verify.Expected{Key: key, Txn: txn, Index: j})
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	l.waitWritten(t, 2000, time.Minute)
	expected := append(l.finish(t), extra...)
	verifyDelivery(t, f, expected, 3*time.Minute)
	alive(t, p, "after ADD COLUMN")
	if n := logCount(p, "session failed"); n != 0 {
		t.Errorf("walpost restarted its session %d times after ADD COLUMN; it must go on", n)
	}
}

// TestRequiredColumnDropped: dropping created_at stops walpost with a
// non-zero exit and a message naming the column, and the slot is not
// confirmed past the transaction it could not forward, so it is re-sent.
func TestRequiredColumnDropped(t *testing.T) {
	t.Parallel()
	f := stackFixture(t, 3)
	p := f.start()
	waitStreaming(t, p)
	ctx := context.Background()
	var before []verify.Expected
	for i := 0; i < 20; i++ {
		exp, err := f.writeTxn(ctx, fmt.Sprintf("good-%d", i), []string{fmt.Sprintf("good-%d-a", i), fmt.Sprintf("good-%d-b", i)}, `{"good": true}`)
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, exp...)
	}
	// Everything before the DROP is delivered and confirmed.
	lastGood := f.currentWAL()
	waitFor(t, 30*time.Second, "slot confirmed past the good events", func() bool {
		lsn, _, _ := f.slotState()
		return lsn >= lastGood
	})
	mustExec(t, f.Pool, fmt.Sprintf(`ALTER TABLE %s DROP COLUMN created_at`, f.Table))
	// The bad transaction, written here rather than with writeTxn so that
	// the WAL insert position just before its COMMIT can be read: the commit
	// record starts at or after badLSN, and PostgreSQL re-sends a transaction
	// whose commit record starts at or after the slot's confirmed position.
	// Keepalives may confirm anything before that (the DROP included).
	after := []verify.Expected{{Key: "bad-a", Txn: "bad", Index: 0}, {Key: "bad-b", Txn: "bad", Index: 1}}
	var badLSN pglogrepl.LSN
	func() {
		tx, err := f.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		for _, e := range after {
			if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES ($1, '{"bad": true}')`, f.Table), e.Key); err != nil {
				t.Fatal(err)
			}
		}
		var s string
		if err := tx.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		if badLSN, err = pglogrepl.ParseLSN(s); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}()
	postCommit := f.currentWAL()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("walpost still runs 30 s after a required column was dropped:\n%s", tail(p.log, 30))
	}
	out, _ := os.ReadFile(p.log)
	code := p.cmd.ProcessState.ExitCode()
	t.Logf("walpost exited with code %d; last lines:\n%s", code, tail(p.log, 5))
	if code <= 0 {
		t.Errorf("exit code %d, want > 0", code)
	}
	stopped := ""
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "walpost stopped") {
			stopped = line
		}
	}
	if !strings.Contains(stopped, "created_at") {
		t.Errorf("no final 'walpost stopped' line naming the column created_at (got %q)", stopped)
	}
	if strings.Contains(string(out), "reconnecting") {
		t.Errorf("walpost retried a fatal schema error")
	}
	confirmed, _, _ := f.slotState()
	t.Logf("slot confirmed %s; WAL insert position before the bad COMMIT %s, after it %s", confirmed, badLSN, postCommit)
	if confirmed > badLSN {
		t.Errorf("slot confirmed %s, past the start of the bad transaction's commit record (at or after %s): it would not be re-sent", confirmed, badLSN)
	}
	if confirmed >= postCommit {
		t.Errorf("slot confirmed %s, past the transaction walpost could not forward (ends by %s)", confirmed, postCommit)
	}
	obs := consumeExpected(t, f, before, time.Minute)
	rep := verify.Validate(before, obs)
	t.Logf("validator: %s", rep)
	if !rep.OK() {
		t.Errorf("events before the DROP: %s", rep)
	}
	for _, o := range obs {
		if o.Key == after[0].Key || o.Key == after[1].Key {
			t.Errorf("event %s written after the DROP was forwarded", o.Key)
		}
	}
	// The message says "restore the column": do that and restart. The
	// transaction written without the column is decoded with the table as
	// it was then, so walpost is expected to stop at it again (recorded,
	// not asserted: recovering needs an operator decision).
	mustExec(t, f.Pool, fmt.Sprintf(`ALTER TABLE %s ADD COLUMN created_at timestamptz NOT NULL DEFAULT now()`, f.Table))
	p2 := f.start()
	select {
	case <-p2.done:
		t.Logf("after restoring the column, a restarted walpost stops again (exit %d): %s",
			p2.cmd.ProcessState.ExitCode(), tail(p2.log, 1))
	case <-time.After(15 * time.Second):
		t.Logf("after restoring the column, a restarted walpost runs on")
	}
	if lsn, _, _ := f.slotState(); lsn != confirmed {
		t.Errorf("slot moved from %s to %s after the restart", confirmed, lsn)
	}
}
