package integration

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/verify"
)

// eosEnv is the environment of an exactly-once walpost on f, with a
// checkpoint topic of the test's own (created by walpost, dropped at
// cleanup).
func (f *fixture) eosEnv(extra ...string) []string {
	cp := "cp_" + f.Topic
	f.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = f.Admin.DeleteTopics(ctx, cp)
	})
	return append([]string{
		"WALPOST_DELIVERY_MODE=exactly-once",
		"WALPOST_KAFKA_CHECKPOINT_TOPIC=" + cp,
		"WALPOST_KAFKA_CREATE_TOPIC_PARTITIONS=" + fmt.Sprint(f.Partitions),
	}, extra...)
}

// countKeys counts the distinct keys with prefix in f's topic as a
// consumer of the given isolation sees them right now.
func (f *fixture) countKeys(t testing.TB, prefix string, opts ...kgo.Opt) int {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(f.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[string]bool{}
	for quiet := 0; quiet < 2; {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			if strings.HasPrefix(string(r.Key), prefix) {
				seen[string(r.Key)] = true
			}
		})
		if n == 0 {
			quiet++
		}
	}
	return len(seen)
}

var checkpointReadRE = regexp.MustCompile(`msg="exactly-once: producer initialised, checkpoint read".*`)

// TestExactlyOnceKill9: 30,000 events from 8 writers and one 20,000-row
// transaction, walpost killed with SIGKILL twice (once while the large
// transaction is being forwarded) and restarted: a read_committed
// consumer sees every event exactly once.
func TestExactlyOnceKill9(t *testing.T) {
	f := newFixture(t, fixtureOpts{partitions: 3})
	// Small Kafka transactions, so the large PostgreSQL transaction spans
	// several and the kill lands between two of them.
	env := f.eosEnv("WALPOST_DELIVERY_TRANSACTION_RECORDS=500")
	p := f.start(env...)
	if !p.waitLog("msg=streaming", 60*time.Second) {
		t.Fatal("walpost did not start streaming")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	l := newLoad(f, 8, 100, 30_000)
	l.pause = 2 * time.Millisecond
	l.start(ctx)
	waitFor(t, 2*time.Minute, "8,000 events written", func() bool { return l.written.Load() > 8_000 })
	if _, err := p.signal(syscall.SIGKILL, 10*time.Second); err == nil {
		t.Fatal("walpost exited cleanly after SIGKILL?")
	}
	t.Logf("kill 1 after %d events written", l.written.Load())
	waitFor(t, 30*time.Second, "slot inactive", func() bool { _, active, _ := f.slotState(); return !active })
	p2 := f.start(env...)
	if !p2.waitLog("msg=streaming", 60*time.Second) {
		t.Fatal("walpost did not stream after kill 1")
	}

	expected := l.wait(t)
	// The writers are done: once the topic is quiet, what it grows by is
	// the large transaction (and its transaction markers).
	base := f.endOffsets(t)
	for quietSince := time.Now(); time.Since(quietSince) < 2*time.Second; time.Sleep(100 * time.Millisecond) {
		if n := f.endOffsets(t); n != base {
			base, quietSince = n, time.Now()
		}
	}
	const big = 20_000
	keys := make([]string, big)
	for i := range keys {
		keys[i] = fmt.Sprintf("big-%05d", i)
	}
	bigExp, err := f.writeTxn(ctx, "big", keys, `{"data": "`+strings.Repeat("y", 150)+`"}`)
	if err != nil {
		t.Fatal(err)
	}
	// Kill while the large transaction is on its way: some of its records
	// are in Kafka (committed or not), not all.
	waitForFast(t, 2*time.Minute, "part of the large transaction in Kafka", func() bool { return f.endOffsets(t)-base >= 1_500 })
	if _, err := p2.signal(syscall.SIGKILL, 10*time.Second); err == nil {
		t.Fatal("walpost exited cleanly after SIGKILL?")
	}
	uncommitted := f.countKeys(t, "big-")
	committed := f.countKeys(t, "big-", kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	t.Logf("kill 2: %d of %d rows of the large transaction in Kafka, %d of them committed", uncommitted, big, committed)
	if uncommitted >= big {
		t.Fatalf("kill 2 came after the whole large transaction was in Kafka (%d records); it must land inside it", uncommitted)
	}
	waitFor(t, 30*time.Second, "slot inactive", func() bool { _, active, _ := f.slotState(); return !active })
	p3 := f.start(env...)
	if !p3.waitLog("msg=streaming", 60*time.Second) {
		t.Fatal("walpost did not stream after kill 2")
	}
	if b, _ := os.ReadFile(p3.log); checkpointReadRE.Find(b) != nil {
		t.Logf("restart 2: %s", checkpointReadRE.Find(b))
	}
	expected = append(expected, bigExp...)
	recs := f.consumeAllWith(t, len(expected), 4*time.Minute, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	rep := verify.Validate(expected, observed(recs))
	t.Logf("read_committed validator: %s", rep)
	if !rep.OK() || rep.Duplicates() != 0 || rep.Delivered != 50_000 {
		t.Fatalf("exactly-once after two kill -9: %s", rep)
	}
	// A second client: librdkafka, read_committed, reading on past the
	// expected count so a duplicate would show.
	rd := verify.Validate(expected, observed(consumeRdkafka(t, f.Topic, "read_committed", len(expected), 5*time.Second, 10*time.Second, 4*time.Minute)))
	t.Logf("librdkafka read_committed validator: %s", rd)
	if !rd.OK() || rd.Duplicates() != 0 || rd.Unexpected != 0 || rd.Delivered != 50_000 {
		t.Errorf("exactly-once through librdkafka after two kill -9: %s", rd)
	}
	// read_uncommitted also sees the records of the aborted transactions.
	ru := verify.Validate(expected, observed(consumeRdkafka(t, f.Topic, "read_uncommitted", len(expected), 5*time.Second, 10*time.Second, 4*time.Minute)))
	t.Logf("librdkafka read_uncommitted (aborted records visible): %s", ru)
	if len(ru.Lost) != 0 {
		t.Errorf("read_uncommitted lost records: %s", ru)
	}
}

// endOffsets is the sum of the end offsets of f's topic's partitions.
func (f *fixture) endOffsets(t testing.TB) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offs, err := f.Admin.ListEndOffsets(ctx, f.Topic)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	offs.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// waitForFast is waitFor polling every 2 ms, for conditions that hold only
// for a moment.
func waitForFast(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
	}
}

// eosVerify reads f's topic with read_committed, with franz-go and with
// librdkafka, and fails the test unless every expected event is there
// exactly once.
func eosVerify(t testing.TB, f *fixture, expected []verify.Expected, timeout time.Duration) {
	t.Helper()
	recs := f.consumeAllWith(t, len(expected), timeout, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	rep := verify.Validate(expected, observed(recs))
	t.Logf("read_committed validator: %s", rep)
	if !rep.OK() || rep.Duplicates() != 0 || rep.Unexpected != 0 || rep.Delivered != len(expected) {
		t.Fatalf("exactly-once delivery failed: %s", rep)
	}
	// The same through librdkafka, reading on past the expected count.
	rd := verify.Validate(expected, observed(consumeRdkafka(t, f.Topic, "read_committed", len(expected), 5*time.Second, 10*time.Second, timeout)))
	t.Logf("librdkafka read_committed validator: %s", rd)
	if !rd.OK() || rd.Duplicates() != 0 || rd.Unexpected != 0 || rd.Delivered != len(expected) {
		t.Errorf("exactly-once delivery through librdkafka failed: %s", rd)
	}
}

// TestExactlyOnceKafkaRestart: Kafka is killed (SIGKILL) and started
// again 10 s later while 8 writers run (30,000 events in all) and a 20,000-row
// transaction commits during the outage; with kafka.flush_timeout 3s the open
// transaction's flush and commit fail (their outcome unknown), it is
// aborted, the session restarts, walpost resumes from the checkpoint, and
// read_committed sees each event once.
func TestExactlyOnceKafkaRestart(t *testing.T) {
	f := faultFixture(t, 3)
	p := f.start(f.eosEnv("WALPOST_KAFKA_FLUSH_TIMEOUT=3s", "WALPOST_DELIVERY_TRANSACTION_RECORDS=2000")...)
	faultStreaming(t, p)
	l := newFaultLoad(f, 8, 20, 5*time.Millisecond).start()
	l.waitWritten(t, 3000, time.Minute)
	faultStack(t, "kafka-stop", "kill")
	big := eosBigTxn(t, f, "big-kafka")
	faultSleep(t, p, 10*time.Second, "while Kafka was down")
	faultStack(t, "kafka-start")
	t.Log("Kafka started again")
	eosWaitTotal(t, l, 30_000)
	expected := append(l.finish(t), big...)
	t.Logf("%d events from 8 writers and a transaction of %d rows committed during the outage", len(expected)-len(big), len(big))
	eosVerify(t, f, expected, 4*time.Minute)
	faultAlive(t, p, "after the Kafka restart")
	n := faultCount(p, "session failed")
	t.Logf("failed sessions: %d", n)
	if n == 0 {
		t.Fatal("no session failed while Kafka was down: the abort and resume path was not exercised")
	}
}

// eosBigTxn commits one transaction of eosBigRows rows keyed name-i.
func eosBigTxn(t testing.TB, f *fixture, name string) []verify.Expected {
	t.Helper()
	keys := make([]string, eosBigRows)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%d", name, i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	exp, err := f.writeTxn(ctx, name, keys, `{"data": "big"}`)
	if err != nil {
		t.Fatalf("the %d-row transaction: %v", eosBigRows, err)
	}
	return exp
}

// eosBigRows is the size of the large transaction of the fault tests.
const eosBigRows = 20_000

// eosWaitTotal waits until the load committed total events in all.
func eosWaitTotal(t testing.TB, l *faultLoad, total int64) {
	t.Helper()
	if n := total - l.written.Load(); n > 0 {
		l.waitWritten(t, n, 3*time.Minute)
	}
}

// TestExactlyOncePostgresCrash: PostgreSQL is stopped with immediate
// (a crash) right after a 20,000-row transaction committed, and started
// again while 8 writers run (30,000 events in all): the slot may go back
// (PostgreSQL 15 keeps a moved confirmed_flush in memory only), the
// checkpoint does not, and read_committed sees each event once.
func TestExactlyOncePostgresCrash(t *testing.T) {
	f := faultFixture(t, 3)
	p := f.start(f.eosEnv("WALPOST_DELIVERY_TRANSACTION_RECORDS=2000")...)
	faultStreaming(t, p)
	l := newFaultLoad(f, 8, 20, 5*time.Millisecond).start()
	l.waitWritten(t, 4000, time.Minute)
	// The crash comes while walpost reads or sends the large transaction.
	big := eosBigTxn(t, f, "big-pg")
	faultStack(t, "pg-stop", "immediate")
	t.Log("PostgreSQL stopped (immediate) right after the large transaction committed")
	faultSleep(t, p, 3*time.Second, "while PostgreSQL was down")
	faultStack(t, "pg-start")
	faultWaitStreamingAgain(t, p, 1, 2*time.Minute)
	eosWaitTotal(t, l, 30_000)
	expected := append(l.finish(t), big...)
	t.Logf("%d events from 8 writers and a transaction of %d rows", len(expected)-len(big), len(big))
	eosVerify(t, f, expected, 4*time.Minute)
	faultAlive(t, p, "after the PostgreSQL crash")
	if b, _ := os.ReadFile(p.log); checkpointReadRE.Match(b) {
		for _, m := range checkpointReadRE.FindAll(b, -1) {
			t.Logf("%s", m)
		}
	}
}

var fencedRE = regexp.MustCompile(`kafka fenced this producer: another walpost initialised the same transactional id`)

// TestExactlyOnceTwoWalposts: walpost A streams, B stands by on the same
// slot, 8 writers run (30,000 events in all). A is frozen (SIGSTOP), a
// 20,000-row transaction commits, and A's walsender is terminated, so B takes the
// slot, fences A's producer and resumes from the checkpoint; when A runs
// again its producer is fenced and it exits 1 with a clear message,
// without committing anything. read_committed sees each event once.
func TestExactlyOnceTwoWalposts(t *testing.T) {
	f := faultFixture(t, 3)
	env := f.eosEnv()
	a := f.start(env...)
	faultStreaming(t, a)
	b := f.start(env...)
	if !b.waitLog("slot is held by another process", time.Minute) {
		t.Fatal("the second walpost did not stand by")
	}
	l := newFaultLoad(f, 8, 20, 5*time.Millisecond).start()
	l.waitWritten(t, 3000, time.Minute)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The large transaction is B's to send, from A's checkpoint.
	big := eosBigTxn(t, f, "big-takeover")
	pid := faultSlotPID(f)
	mustExec(t, f.Pool, `SELECT pg_terminate_backend($1)`, pid)
	if !b.waitLog("msg=streaming", 2*time.Minute) {
		t.Fatal("the standby did not take the slot")
	}
	l.waitWritten(t, 3000, time.Minute)
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the fenced walpost did not exit:\n%s", tail(a.log, 30))
	}
	log, _ := os.ReadFile(a.log)
	if exitCode(a.err) != 1 || !fencedRE.Match(log) {
		t.Fatalf("the fenced walpost exited %v; want exit 1 with %q:\n%s", a.err, fencedRE, tail(a.log, 30))
	}
	t.Logf("fenced walpost: %s", regexp.MustCompile(`.*kafka fenced this producer.*`).Find(log))
	eosWaitTotal(t, l, 30_000)
	expected := append(l.finish(t), big...)
	t.Logf("%d events from 8 writers and a transaction of %d rows", len(expected)-len(big), len(big))
	eosVerify(t, f, expected, 4*time.Minute)
	faultAlive(t, b, "after taking over")
}

// TestExactlyOncePoisonInTransaction: a record larger than the topic's
// max.message.bytes, in the middle of a PostgreSQL transaction, aborts the
// Kafka transaction; after poison.max_attempts it is quarantined (the
// poison row committed before the checkpoint that steps past it), and
// every other event of its transaction and around it arrives once.
func TestExactlyOncePoisonInTransaction(t *testing.T) {
	maxBytes := "20000"
	f := newFixture(t, fixtureOpts{partitions: 3, topicConfig: map[string]*string{"max.message.bytes": &maxBytes}})
	p := f.start(f.eosEnv("WALPOST_POISON_MAX_ATTEMPTS=2")...)
	if !p.waitLog("msg=streaming", 60*time.Second) {
		t.Fatal("walpost did not start streaming")
	}
	ctx := context.Background()
	before, err := f.writeTxn(ctx, "before", []string{"before-0", "before-1", "before-2"}, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := f.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var exp []verify.Expected
	for i := range 5 {
		key, payload := fmt.Sprintf("mid-%d", i), `{}`
		if i == 2 {
			key, payload = "poison-big", `{"big": "`+strings.Repeat("z", 40_000)+`"}`
		} else {
			exp = append(exp, verify.Expected{Key: key, Txn: "mid", Index: len(exp)})
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES ($1, $2)`, f.Table), key, payload); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := f.writeTxn(ctx, "after", []string{"after-0", "after-1"}, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Minute, "the poison row", func() bool {
		var n int
		_ = f.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE idempotency_key = 'poison-big'`, f.PoisonTable)).Scan(&n)
		return n == 1
	})
	expected := append(append(before, exp...), after...)
	eosVerify(t, f, expected, 2*time.Minute)
	if n := faultCount(p, "kafka refused a record inside a transaction"); n != 2 {
		t.Errorf("%d refusals logged, want poison.max_attempts = 2", n)
	}
	faultAlive(t, p, "after the quarantine")
}

// TestExactlyOnceCheckpointTopicMissing: without kafka.create_topic_partitions
// a missing checkpoint topic stops walpost with exit 1 and the fix.
func TestExactlyOnceCheckpointTopicMissing(t *testing.T) {
	f := newFixture(t, fixtureOpts{partitions: 1})
	p := f.start("WALPOST_DELIVERY_MODE=exactly-once", "WALPOST_KAFKA_CHECKPOINT_TOPIC=missing_"+f.Topic)
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		t.Fatalf("walpost did not exit:\n%s", tail(p.log, 20))
	}
	log, _ := os.ReadFile(p.log)
	want := `kafka-topics.sh --create --topic missing_` + f.Topic + ` --partitions 1 --config cleanup.policy=compact`
	if exitCode(p.err) != 1 || !strings.Contains(string(log), want) {
		t.Fatalf("exit %v, want 1 and %q in the log:\n%s", p.err, want, tail(p.log, 20))
	}
}

// TestExactlyOncePoisonInLargeTransaction: the refused record is row
// 10,000 of a 20,000-row transaction, while 8 writers run (30,000 events
// in all) and the large transaction spans several Kafka transactions:
// each refusal aborts the open one and the session resumes inside the
// PostgreSQL transaction from the checkpoint's ordinal; after
// poison.max_attempts the row is quarantined and every other event
// arrives once.
func TestExactlyOncePoisonInLargeTransaction(t *testing.T) {
	maxBytes := "20000"
	f := newFixture(t, fixtureOpts{partitions: 3, topicConfig: map[string]*string{"max.message.bytes": &maxBytes}})
	p := f.start(f.eosEnv("WALPOST_POISON_MAX_ATTEMPTS=2", "WALPOST_DELIVERY_TRANSACTION_RECORDS=2000")...)
	faultStreaming(t, p)
	l := newFaultLoad(f, 8, 20, 5*time.Millisecond).start()
	l.waitWritten(t, 3000, time.Minute)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tx, err := f.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	rows := make([][]any, eosBigRows)
	var big []verify.Expected
	for i := range rows {
		key, payload := fmt.Sprintf("bigp-%d", i), `{"data": "big"}`
		if i == eosBigRows/2 {
			key, payload = "poison-big", `{"big": "`+strings.Repeat("z", 40_000)+`"}`
		} else {
			big = append(big, verify.Expected{Key: key, Txn: "bigp", Index: len(big)})
		}
		rows[i] = []any{key, payload}
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{f.Table}, []string{"idempotency_key", "payload"}, pgx.CopyFromRows(rows)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Minute, "the poison row", func() bool {
		var n int
		_ = f.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE idempotency_key = 'poison-big'`, f.PoisonTable)).Scan(&n)
		return n == 1
	})
	eosWaitTotal(t, l, 30_000)
	expected := append(l.finish(t), big...)
	t.Logf("%d events from 8 writers and %d of the large transaction (its poison row quarantined)", len(expected)-len(big), len(big))
	eosVerify(t, f, expected, 4*time.Minute)
	if n := faultCount(p, "kafka refused a record inside a transaction"); n != 2 {
		t.Errorf("%d refusals logged, want poison.max_attempts = 2", n)
	}
	faultAlive(t, p, "after the quarantine")
}
