package integration

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// TestExactlyOnceEveryFault: one run, 8 writers (about 800 events/s, at
// least 30,000 events) and a
// 20,000-row transaction, through every fault exactly-once must survive,
// in turn: walpost A killed -9 while it forwards the large transaction
// (after part of it committed), the hot standby B taking the slot over;
// B frozen (SIGSTOP) past delivery.transaction_timeout with its walsender
// terminated, A (restarted as the standby) taking over and fencing it;
// Kafka killed and started; PostgreSQL crashed (immediate) and started.
// A read_committed consumer, franz-go and librdkafka, sees every event
// once and nothing else.
//
// It stops the stack's Kafka and PostgreSQL: it must not run beside
// other tests (no t.Parallel).
func TestExactlyOnceEveryFault(t *testing.T) {
	f := stackFixture(t, 3)
	env := f.exactlyOnceEnv("WALPOST_DELIVERY_TRANSACTION_RECORDS=500", "WALPOST_DELIVERY_TRANSACTION_TIMEOUT=10s", "WALPOST_KAFKA_FLUSH_TIMEOUT=5s")
	a := f.start(env...)
	waitStreaming(t, a)
	b := f.start(env...)
	if !b.waitLog("slot is held by another process", time.Minute) {
		t.Fatal("the second walpost did not stand by")
	}
	l := newWriterLoad(f, 8, 20, 100*time.Millisecond).start()
	l.waitWritten(t, 3000, time.Minute)

	// 1. kill -9 inside the large transaction; the standby takes over.
	base := f.stableOffsets(t)
	big := bigTxn(t, f, "big-every")
	// Most of what commits now is the large transaction (the writers add
	// about 800 events/s).
	waitForFast(t, 2*time.Minute, "part of the large transaction committed", func() bool { return f.stableOffsets(t) > base+2000 })
	if _, err := a.signal(syscall.SIGKILL, 10*time.Second); err == nil {
		t.Fatal("walpost exited cleanly after SIGKILL?")
	}
	t.Logf("fault 1: A killed -9 with %d more offsets committed since the large transaction was written (it has %d rows)", f.stableOffsets(t)-base, bigTxnRows)
	if !b.waitLog("msg=streaming", 2*time.Minute) {
		t.Fatalf("the standby did not take the slot after kill -9:\n%s", tail(b.log, 30))
	}
	// Either may hold the slot now: the restarted walpost initialises its
	// exactly-once producer first, which fences B's; B's session restarts,
	// and the restarted walpost may take the slot in between (seen on a
	// busy machine). The one that streams is B below, the other A.
	standing := logCount(b, "slot is held by another process")
	a = f.start(env...)
	swapped := false
	waitFor(t, 2*time.Minute, "one walpost streaming, the other standing by", func() bool {
		if logCount(a, "slot is held by another process") > 0 {
			return true
		}
		swapped = logCount(a, "msg=streaming") > 0 && logCount(b, "slot is held by another process") > standing
		return swapped || a.exited()
	})
	if a.exited() {
		t.Fatalf("the restarted walpost exited: %v\n%s", a.err, tail(a.log, 30))
	}
	if swapped {
		a, b = b, a
		t.Log("the restarted walpost took the slot (B's producer was fenced by its initialisation); B stands by")
	}

	// 2. B frozen past the transaction timeout, its walsender
	// terminated: A takes over and fences it. B is frozen only once it
	// has caught up with the WAL (the large transaction included): a
	// walsender terminated while its frozen client's socket is full
	// cannot send its FATAL and exit, so it would hold the slot until B
	// resumed (PostgreSQL's behaviour, not walpost's; slower acks, as on
	// three brokers, leave B behind longer after taking over).
	l.waitWritten(t, 3000, time.Minute)
	caughtUp := f.currentWAL()
	waitFor(t, 2*time.Minute, "the standby to confirm the WAL written before it is frozen", func() bool {
		lsn, _, _ := f.slotState()
		return lsn >= caughtUp || b.exited()
	})
	if b.exited() {
		t.Fatalf("the standby exited before it was frozen: %v\n%s", b.err, tail(b.log, 30))
	}
	if err := b.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	sessions := logCount(a, "msg=streaming")
	mustExec(t, f.Pool, `SELECT pg_terminate_backend($1)`, slotPID(f))
	waitFor(t, 2*time.Minute, "A streaming after B was frozen", func() bool { return logCount(a, "msg=streaming") > sessions || a.exited() })
	if a.exited() {
		t.Fatalf("the standby did not take the slot from the frozen walpost:\n%s", tail(a.log, 30))
	}
	// The property is the broker's transaction timeout (10 s): B stays
	// frozen past it, so the broker aborts B's open transaction.
	sleepAlive(t, a, time.Until(frozen.Add(12*time.Second)), "while the other walpost was frozen")
	if err := b.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Log("fault 2: B frozen 12 s with its walsender terminated, A took over")

	// 3. Kafka killed and started.
	l.waitWritten(t, 3000, time.Minute)
	sessions = logCount(a, "msg=streaming")
	stackCtl(t, "kafka-stop", "kill")
	sleepAlive(t, a, 3*time.Second, "while Kafka was down")
	stackCtl(t, "kafka-start")
	// A session whose commit failed while Kafka was down starts again; one
	// whose producer rode the outage out (franz-go retried, the flush and
	// EndTxn succeeded once the broker was back) goes on. Either way
	// walpost must confirm what the writers commit after the restart.
	back := f.currentWAL()
	rode := false
	waitFor(t, 2*time.Minute, "a new session after the Kafka kill, or the slot confirmed past what was written after it", func() bool {
		if logCount(a, "msg=streaming") > sessions || a.exited() {
			return true
		}
		lsn, _, _ := f.slotState()
		rode = lsn > back
		return rode
	})
	if a.exited() {
		t.Fatalf("walpost exited after the Kafka kill: %v\n%s", a.err, tail(a.log, 30))
	}
	t.Logf("fault 3: Kafka killed and started (walpost's session rode it out: %v)", rode)

	// 4. PostgreSQL crashed and started.
	// A loses its connections; B, if it still runs (fenced at fault 2, it
	// may have exited), stands by: either may take the slot when
	// PostgreSQL is back.
	l.waitWritten(t, 3000, time.Minute)
	sessions = logCount(a, "msg=streaming") + logCount(b, "msg=streaming")
	stackCtl(t, "pg-stop", "immediate")
	sleepAlive(t, a, 2*time.Second, "while PostgreSQL was down")
	stackCtl(t, "pg-start")
	waitFor(t, 2*time.Minute, "a new session of either walpost after the PostgreSQL crash", func() bool {
		return logCount(a, "msg=streaming")+logCount(b, "msg=streaming") > sessions || a.exited()
	})
	if a.exited() {
		t.Fatalf("walpost A exited after the PostgreSQL crash: %v\n%s", a.err, tail(a.log, 30))
	}
	t.Log("fault 4: PostgreSQL crashed and started")

	waitTotal(t, l, 30_000)
	expected := append(l.finish(t), big...)
	t.Logf("%d events from 8 writers and a transaction of %d rows", len(expected)-len(big), len(big))
	verifyReadCommitted(t, f, expected, 4*time.Minute)
	alive(t, a, "after every fault")
	// The frozen walpost either exited 1, fenced, or stands by: it
	// committed nothing after the fence (the validator saw no duplicate).
	if b.exited() {
		if log, _ := os.ReadFile(b.log); exitCode(b.err) != 1 || !fencedRE.Match(log) {
			t.Errorf("the frozen walpost exited %v without the fencing message:\n%s", b.err, tail(b.log, 30))
		}
	}
}
