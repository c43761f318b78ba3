package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walpost/walpost/sink/kafka"
	"github.com/walpost/walpost/verify"
)

// exactlyOnceEnv is the environment of an exactly-once walpost on f, with a
// checkpoint topic of the test's own (created by walpost, dropped at
// cleanup).
func (f *fixture) exactlyOnceEnv(extra ...string) []string {
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
// consumer of the given isolation sees them right now (countRecords).
func (f *fixture) countKeys(t testing.TB, prefix string, opts ...kgo.Opt) int {
	t.Helper()
	_, distinct := f.countRecords(t, prefix, opts...)
	return distinct
}

var checkpointReadRE = regexp.MustCompile(`msg="exactly-once: producer initialised, checkpoint read".*`)

// TestExactlyOnceKill9: 30,000 events from 8 writers and one 20,000-row
// transaction, walpost killed with SIGKILL twice and restarted, the
// second time after part of the large transaction committed and before
// all of it did: the restart resumes inside it from the checkpoint's
// partial_commit_lsn and ordinal, and read_committed consumers (franz-go
// and librdkafka) see every event exactly once and nothing else.
func TestExactlyOnceKill9(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 3})
	// Small Kafka transactions, so the large PostgreSQL transaction spans
	// several and the kill lands between two of them.
	env := f.exactlyOnceEnv("WALPOST_DELIVERY_TRANSACTION_RECORDS=500")
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
	// The writers are done: once every event of theirs is committed in
	// Kafka, what the topic grows by is the large transaction (and its
	// transaction markers). A quiet spell is no proof of that under load.
	waitFor(t, 2*time.Minute, "every event of the writers committed in Kafka", func() bool {
		return f.countKeys(t, "w", kgo.FetchIsolationLevel(kgo.ReadCommitted())) >= len(expected)
	})
	base := f.endOffsets(t)
	const big = 20_000
	keys := make([]string, big)
	for i := range keys {
		keys[i] = fmt.Sprintf("big-%05d", i)
	}
	bigExp, err := f.writeTxn(ctx, "big", keys, `{"data": "`+strings.Repeat("y", 150)+`"}`)
	if err != nil {
		t.Fatal(err)
	}
	// Kill once part of the large transaction is committed and before all
	// of it is: a Kafka transaction of it ended (the read_committed end of
	// the quiet topic moved past base), so its checkpoint names the large
	// transaction as partial. The restart must resume inside it.
	waitForFast(t, 2*time.Minute, "a Kafka transaction of the large transaction committed", func() bool { return f.stableOffsets(t) > base })
	if _, err := p2.signal(syscall.SIGKILL, 10*time.Second); err == nil {
		t.Fatal("walpost exited cleanly after SIGKILL?")
	}
	uncommitted := f.countKeys(t, "big-")
	committed := f.countKeys(t, "big-", kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	t.Logf("kill 2: %d of %d rows of the large transaction in Kafka, %d of them committed", uncommitted, big, committed)
	if committed == 0 || committed >= big {
		t.Fatalf("kill 2 came with %d of the %d rows of the large transaction committed; it must land after part of it and before all of it committed", committed, big)
	}
	waitFor(t, 30*time.Second, "slot inactive", func() bool { _, active, _ := f.slotState(); return !active })
	p3 := f.start(env...)
	if !p3.waitLog("msg=streaming", 60*time.Second) {
		t.Fatal("walpost did not stream after kill 2")
	}
	// The session after kill 2 resumes inside the large transaction: its
	// checkpoint names it as partial, with at least the rows read_committed
	// showed (a commit under way at the kill may have completed since).
	cp := checkpointReads(t, p3)[0]
	t.Logf("restart 2 resumed from: %s", cp.Line)
	if cp.Partial == 0 || cp.Ordinal < committed || cp.Ordinal >= big {
		t.Errorf("restart 2 resumed from partial_commit_lsn %s ordinal %d; want the large transaction as partial, ordinal in [%d, %d) (%d of its rows committed)",
			cp.Partial, cp.Ordinal, committed, big, committed)
	}
	expected = append(expected, bigExp...)
	recs := f.consumeAllWith(t, len(expected), 4*time.Minute, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	rep := verify.Validate(expected, observed(recs))
	t.Logf("read_committed validator: %s", rep)
	if !rep.OK() || rep.Duplicates() != 0 || rep.Unexpected != 0 || rep.Delivered != 50_000 {
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
	return f.sumOffsets(t, f.Admin.ListEndOffsets)
}

// stableOffsets is the sum of the last stable offsets of f's topic's
// partitions: where read_committed ends, the first offset of the oldest
// open transaction or the end.
func (f *fixture) stableOffsets(t testing.TB) int64 {
	t.Helper()
	return f.sumOffsets(t, f.Admin.ListCommittedOffsets)
}

func (f *fixture) sumOffsets(t testing.TB, list func(context.Context, ...string) (kadm.ListedOffsets, error)) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offs, err := list(ctx, f.Topic)
	if err == nil {
		err = offs.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	offs.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// checkpointRead is a session's "checkpoint read" line: the checkpoint it
// resumed from.
type checkpointRead struct {
	LSN, Partial pglogrepl.LSN
	Ordinal      int
	Line         string
}

var checkpointFieldsRE = regexp.MustCompile(` lsn=(\S+) .*partial_commit_lsn=(\S+) ordinal=(\d+)`)

// checkpointReads returns the checkpoints p's sessions read, in order; it
// fails the test when there is none.
func checkpointReads(t testing.TB, p *proc) []checkpointRead {
	t.Helper()
	b, _ := os.ReadFile(p.log)
	var out []checkpointRead
	for _, line := range checkpointReadRE.FindAll(b, -1) {
		m := checkpointFieldsRE.FindSubmatch(line)
		if m == nil {
			t.Fatalf("checkpoint line without lsn, partial_commit_lsn and ordinal: %s", line)
		}
		lsn, err1 := pglogrepl.ParseLSN(string(m[1]))
		partial, err2 := pglogrepl.ParseLSN(string(m[2]))
		ord, err3 := strconv.Atoi(string(m[3]))
		if err := errors.Join(err1, err2, err3); err != nil {
			t.Fatalf("checkpoint line %s: %v", line, err)
		}
		out = append(out, checkpointRead{LSN: lsn, Partial: partial, Ordinal: ord, Line: string(line)})
	}
	if len(out) == 0 {
		t.Fatalf("no session of walpost read a checkpoint:\n%s", tail(p.log, 30))
	}
	return out
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

// verifyReadCommitted reads f's topic with read_committed, with franz-go and with
// librdkafka, and fails the test unless every expected event is there
// exactly once.
func verifyReadCommitted(t testing.TB, f *fixture, expected []verify.Expected, timeout time.Duration) {
	t.Helper()
	recs := f.consumeAllWith(t, len(expected), timeout, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	rep := verify.Validate(expected, observed(recs))
	t.Logf("read_committed validator: %s", rep)
	if !rep.OK() || rep.Duplicates() != 0 || rep.Unexpected != 0 || rep.Delivered != len(expected) {
		dumpCheckpoints(t, "cp_"+f.Topic, 40)
		t.Fatalf("exactly-once delivery failed: %s", rep)
	}
	// The same through librdkafka, reading on past the expected count.
	rd := verify.Validate(expected, observed(consumeRdkafka(t, f.Topic, "read_committed", len(expected), 5*time.Second, 10*time.Second, timeout)))
	t.Logf("librdkafka read_committed validator: %s", rd)
	if !rd.OK() || rd.Duplicates() != 0 || rd.Unexpected != 0 || rd.Delivered != len(expected) {
		t.Errorf("exactly-once delivery through librdkafka failed: %s", rd)
	}
}

// TestExactlyOnceKafkaRestart: Kafka is killed (SIGKILL; walpost stopped
// for that moment with a transaction open, out of a commit's marker
// phase: stopInOpenTxn) and started
// again 10 s later while 4 writers run (15,000 events in all) and a 20,000-row
// transaction commits during the outage; with kafka.flush_timeout 3s the open
// transaction's flush and commit fail (their outcome unknown), it is
// aborted, the session restarts, walpost resumes from the checkpoint, and
// read_committed sees each event once.
func TestExactlyOnceKafkaRestart(t *testing.T) {
	f := stackFixture(t, 3)
	p := f.start(f.exactlyOnceEnv("WALPOST_KAFKA_FLUSH_TIMEOUT=3s", "WALPOST_DELIVERY_TRANSACTION_RECORDS=2000")...)
	waitStreaming(t, p)
	l := newWriterLoad(f, 4, 20, 20*time.Millisecond).start()
	l.waitWritten(t, 3000, time.Minute)
	state := stopInOpenTxn(t, f, p)
	stackCtl(t, "kafka-stop", "kill")
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("Kafka killed with a transaction of walpost's %s", state)
	big := bigTxn(t, f, "big-kafka")
	sleepAlive(t, p, 10*time.Second, "while Kafka was down")
	stackCtl(t, "kafka-start")
	t.Log("Kafka started again")
	waitTotal(t, l, 15_000)
	expected := append(l.finish(t), big...)
	t.Logf("%d events from 4 writers and a transaction of %d rows committed during the outage", len(expected)-len(big), len(big))
	skipIfMarkersSkipped(t, f, p, expected)
	verifyReadCommitted(t, f, expected, 4*time.Minute)
	alive(t, p, "after the Kafka restart")
	n := logCount(p, "session failed")
	t.Logf("failed sessions: %d", n)
	if n == 0 {
		t.Fatal("no session failed while Kafka was down: the abort and resume path was not exercised")
	}
}

// stopInOpenTxn stops walpost (SIGSTOP; the caller sends SIGCONT) while
// the coordinator holds a transaction of its transactional id open with
// partitions (DescribeTransactions: Ongoing), out of any commit's marker
// phase, and returns that transaction. A single broker killed while
// markers are in flight hangs their transaction after its restart
// (KAFKA-20734, skipIfMarkersSkipped): in 6 of 11 runs here, as walpost,
// once it follows the writers, commits back to back. A commit whose EndTxn
// was on its way when walpost stopped shows as PrepareCommit by the
// second of two reads 100 ms apart; walpost then runs on and is stopped
// again.
func stopInOpenTxn(t *testing.T, f *fixture, p *proc) string {
	t.Helper()
	id := kafka.TransactionalID(f.Slot, systemID(t, f))
	describe := func() (kadm.DescribedTransaction, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d, err := f.Admin.DescribeTransactions(ctx, id)
		if err != nil {
			return kadm.DescribedTransaction{}, false
		}
		tx, ok := d[id]
		return tx, ok && tx.Err == nil && tx.State == "Ongoing" && len(tx.Topics) > 0
	}
	for attempt := 1; attempt <= 50; attempt++ {
		waitFor(t, 30*time.Second, "a transaction of walpost's open with partitions", func() bool { _, ok := describe(); return ok })
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		first, ok1 := describe()
		time.Sleep(100 * time.Millisecond) // the gap between the two reads, not a wait for a condition
		second, ok2 := describe()
		if ok1 && ok2 && first.ProducerID == second.ProducerID && first.ProducerEpoch == second.ProducerEpoch {
			return fmt.Sprintf("Ongoing (producer %d, epoch %d, topics %v; attempt %d)", second.ProducerID, second.ProducerEpoch, second.Topics.Topics(), attempt)
		}
		if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("walpost was never stopped with a transaction open out of its commit in 50 attempts")
	return ""
}

// skipIfMarkersSkipped ends the test as skipped when the broker's log says
// it completed one of walpost's transactions without writing its markers
// (KAFKA-20734: Kafka 4.x skips them for a partition without a leader).
// A single broker killed while a commit's markers are in flight does that
// after its restart: its new incarnation cannot register while the old
// one's session lives, its reloaded coordinator cannot reach the listener
// that opens only after registration, and the old registration's fencing
// leaves every partition leaderless just then. The transaction's records
// then pin their partitions' last stable offset until an operator aborts
// them (README, Runbook), and the delivery check cannot pass; walpost
// itself waits only when its checkpoint record is among them. The test
// does not try to tell which of the outcomes of a broken transaction
// protocol it met: any failed check is reported with the broker's line
// and the validator's report, as a skip. A transaction that had written
// nothing to its partitions leaves nothing open: when read_committed then
// sees every event once, the test goes on. (One node only: a cluster's
// logs are kafka<N>-node<i>.log, and its partitions keep a leader.)
func skipIfMarkersSkipped(t *testing.T, f *fixture, p *proc, expected []verify.Expected) {
	t.Helper()
	line := markersSkipped(filepath.Join(stackDir(), "kafka.log"), kafka.TransactionalID(f.Slot, systemID(t, f)))
	if line == "" {
		return
	}
	alive(t, p, "after Kafka skipped its transaction's markers")
	rep := verify.Validate(expected, observed(f.consumeAllWith(t, len(expected), 2*time.Minute, kgo.FetchIsolationLevel(kgo.ReadCommitted()))))
	if rep.OK() && rep.Duplicates() == 0 && rep.Unexpected == 0 && rep.Delivered == len(expected) {
		t.Logf("Kafka skipped the markers of one of walpost's transactions (KAFKA-20734), which had nothing open on its partitions: %s", line)
		return
	}
	t.Skipf("Kafka completed one of walpost's transactions without writing its markers (KAFKA-20734), so its records hang until they are aborted and read_committed readers stop at them (%s; sessions that found an unmarked checkpoint record: %d). Broker: %s",
		rep, logCount(p, "have no transaction marker at the leader"), line)
}

// markersSkipped returns the first line of the broker log at path saying
// the transaction coordinator skipped the markers of a transaction of
// transactional id txnID, or "".
func markersSkipped(path, txnID string) string {
	b, _ := os.ReadFile(path)
	for line := range strings.Lines(string(b)) {
		if strings.Contains(line, "Couldn't find leader endpoint for partitions") &&
			strings.Contains(line, "send transaction markers for "+txnID+",") {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// bigTxn commits one transaction of bigTxnRows rows keyed name-i.
func bigTxn(t testing.TB, f *fixture, name string) []verify.Expected {
	t.Helper()
	keys := make([]string, bigTxnRows)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%d", name, i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	exp, err := f.writeTxn(ctx, name, keys, `{"data": "big"}`)
	if err != nil {
		t.Fatalf("the %d-row transaction: %v", bigTxnRows, err)
	}
	return exp
}

// bigTxnRows is the size of the large transaction of the fault tests.
const bigTxnRows = 20_000

// waitTotal waits until the load committed total events in all.
func waitTotal(t testing.TB, l *writerLoad, total int64) {
	t.Helper()
	if n := total - l.written.Load(); n > 0 {
		l.waitWritten(t, n, 3*time.Minute)
	}
}

// TestExactlyOncePostgresCrash: PostgreSQL is stopped with immediate (a
// crash) after a 20,000-row transaction committed, while 4 writers run
// (15,000 events in all), and started again. The crash comes when the
// slot's confirmed_flush moved in memory past what PostgreSQL 15 wrote of
// it to disk (freezeUnsaved), so the slot goes back below what walpost
// had confirmed; the checkpoint does not go back, the session after the
// crash skips the re-sent events the checkpoint covers, and read_committed
// sees each event once.
func TestExactlyOncePostgresCrash(t *testing.T) {
	t.Parallel()
	f := ownFixture(t, 3)
	p := f.start(f.exactlyOnceEnv("WALPOST_DELIVERY_TRANSACTION_RECORDS=2000")...)
	waitStreaming(t, p)
	l := newWriterLoad(f, 4, 20, 20*time.Millisecond).start()
	l.waitWritten(t, 4000, time.Minute)
	big := bigTxn(t, f, "big-pg")
	saved, confirmed := freezeUnsaved(t, f, p)
	f.pg(t, "pg-stop", "immediate")
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("PostgreSQL stopped (immediate) with the slot confirmed at %s in memory, at most %s on disk", confirmed, saved)
	sleepAlive(t, p, 3*time.Second, "while PostgreSQL was down")
	f.pg(t, "pg-start")
	waitStreamingAgain(t, p, 1, 2*time.Minute)

	// The slot went back, the checkpoint did not, and the session skipped
	// what the checkpoint covers.
	log := func() []byte { b, _ := os.ReadFile(p.log); return b }
	m := skipToRE.FindSubmatch(log())
	if m == nil {
		t.Fatalf("the session after the crash did not skip up to the checkpoint (no %q line):\n%s", skipToRE, tail(p.log, 30))
	}
	slotLSN, err1 := pglogrepl.ParseLSN(string(m[1]))
	skipTo, err2 := pglogrepl.ParseLSN(string(m[2]))
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("%s: %v", m[0], err)
	}
	t.Logf("after the crash: %s", m[0])
	if slotLSN >= confirmed {
		t.Errorf("after the crash the slot is at %s, not below the %s walpost had confirmed: it did not go back", slotLSN, confirmed)
	}
	if skipTo < confirmed {
		t.Errorf("the session after the crash skips up to %s, below the %s walpost had confirmed (the checkpoint is at or past every confirmation)", skipTo, confirmed)
	}
	waitFor(t, time.Minute, "the skipper's report", func() bool { return skippedRE.Match(log()) })
	r := skippedRE.FindSubmatch(log())
	t.Logf("skipper: %s", r[0])
	if n, _ := strconv.Atoi(string(r[1])); n == 0 {
		t.Errorf("the session after the crash skipped no event: the slot re-sent nothing the checkpoint covers")
	}

	waitTotal(t, l, 15_000)
	expected := append(l.finish(t), big...)
	t.Logf("%d events from 4 writers and a transaction of %d rows", len(expected)-len(big), len(big))
	verifyReadCommitted(t, f, expected, 4*time.Minute)
	alive(t, p, "after the PostgreSQL crash")
}

var (
	skipToRE  = regexp.MustCompile(`msg="exactly-once: transactions at or before the committed checkpoint are skipped".* slot_lsn=(\S+) skip_to=(\S+)`)
	skippedRE = regexp.MustCompile(`msg="skipped events already confirmed before the slot lost its position".* events=(\d+)`)
)

// slotMemory is what pg_replication_slots shows of a logical slot: the
// server's memory, which a crash may lose.
type slotMemory struct {
	Confirmed, Restart pglogrepl.LSN
	CatalogXmin        string
}

func (f *fixture) slotMemory(t testing.TB) slotMemory {
	t.Helper()
	var confirmed, restart, xmin string
	err := f.Pool.QueryRow(context.Background(), `SELECT confirmed_flush_lsn::text, restart_lsn::text, coalesce(catalog_xmin::text, '')
		FROM pg_replication_slots WHERE slot_name = $1`, f.Slot).Scan(&confirmed, &restart, &xmin)
	if err != nil {
		t.Fatalf("read slot %s: %v", f.Slot, err)
	}
	s := slotMemory{CatalogXmin: xmin}
	var err1, err2 error
	s.Confirmed, err1 = pglogrepl.ParseLSN(confirmed)
	s.Restart, err2 = pglogrepl.ParseLSN(restart)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("slot %s: %v", f.Slot, err)
	}
	return s
}

// freezeUnsaved freezes p (SIGSTOP) at a moment the slot's
// confirmed_flush in memory is past what PostgreSQL wrote of it to disk,
// and returns the most the disk holds (saved) and what walpost confirmed
// (confirmed), saved < confirmed. The caller crashes the server, so the
// slot goes back, and then sends SIGCONT.
//
// PostgreSQL 15 writes a logical slot to disk when a confirmation moves its
// restart_lsn or catalog_xmin (LogicalConfirmReceivedLocation), with the
// confirmed_flush of that moment. A confirmation that moves neither stays
// in memory, and a CHECKPOINT does not write it (the slot is not marked
// dirty). So once the slot was seen confirmed further with restart_lsn and
// catalog_xmin unchanged, the disk is behind; walpost frozen, no further
// confirmation writes it.
func freezeUnsaved(t testing.TB, f *fixture, p *proc) (saved, confirmed pglogrepl.LSN) {
	t.Helper()
	before := f.slotMemory(t)
	for attempt := 1; ; attempt++ {
		waitFor(t, time.Minute, "walpost confirming more", func() bool { return f.slotMemory(t).Confirmed > before.Confirmed })
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		// Twice: a status update walpost sent just before the stop is
		// applied by then.
		now := f.slotMemory(t)
		if again := f.slotMemory(t); again == now && now.Restart == before.Restart && now.CatalogXmin == before.CatalogXmin {
			t.Logf("walpost frozen (attempt %d): slot confirmed %s in memory, at most %s on disk (restart_lsn %s, catalog_xmin %s)",
				attempt, now.Confirmed, before.Confirmed, now.Restart, now.CatalogXmin)
			return before.Confirmed, now.Confirmed
		}
		if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if attempt == 20 {
			t.Fatalf("the slot was written to disk at each of %d confirmations", attempt)
		}
		before = f.slotMemory(t)
	}
}

var fencedRE = regexp.MustCompile(`kafka fenced this producer: another walpost initialised the same transactional id`)

// TestExactlyOnceTwoWalposts: walpost A streams, B stands by on the same
// slot, 4 writers run (15,000 events in all). A is frozen (SIGSTOP), a
// 20,000-row transaction commits, and A's walsender is terminated, so B takes the
// slot, fences A's producer and resumes from the checkpoint; when A runs
// again its producer is fenced and it exits 1 with a clear message,
// without committing anything. read_committed sees each event once.
func TestExactlyOnceTwoWalposts(t *testing.T) {
	t.Parallel()
	f := stackFixture(t, 3)
	env := f.exactlyOnceEnv()
	a := f.start(env...)
	waitStreaming(t, a)
	b := f.start(env...)
	if !b.waitLog("slot is held by another process", time.Minute) {
		t.Fatal("the second walpost did not stand by")
	}
	l := newWriterLoad(f, 4, 20, 20*time.Millisecond).start()
	l.waitWritten(t, 3000, time.Minute)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The large transaction is B's to send, from A's checkpoint.
	big := bigTxn(t, f, "big-takeover")
	pid := slotPID(f)
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
	waitTotal(t, l, 15_000)
	expected := append(l.finish(t), big...)
	t.Logf("%d events from 4 writers and a transaction of %d rows", len(expected)-len(big), len(big))
	verifyReadCommitted(t, f, expected, 4*time.Minute)
	alive(t, b, "after taking over")
}

// TestExactlyOncePoisonInTransaction: a record larger than the topic's
// max.message.bytes, in the middle of a PostgreSQL transaction, aborts the
// Kafka transaction; after poison.max_attempts it is quarantined (the
// poison row committed before the checkpoint that steps past it), and
// every other event of its transaction and around it arrives once.
func TestExactlyOncePoisonInTransaction(t *testing.T) {
	t.Parallel()
	maxBytes := "20000"
	f := newFixture(t, fixtureOpts{partitions: 3, topicConfig: map[string]*string{"max.message.bytes": &maxBytes}})
	p := f.start(f.exactlyOnceEnv("WALPOST_POISON_MAX_ATTEMPTS=2")...)
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
	verifyReadCommitted(t, f, expected, 2*time.Minute)
	if n := logCount(p, "kafka refused a record inside a transaction"); n != 2 {
		t.Errorf("%d refusals logged, want poison.max_attempts = 2", n)
	}
	alive(t, p, "after the quarantine")
}

// TestExactlyOnceCheckpointTopicMissing: without kafka.create_topic_partitions
// a missing checkpoint topic stops walpost with exit 1 and the fix.
func TestExactlyOnceCheckpointTopicMissing(t *testing.T) {
	t.Parallel()
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
// 10,000 of a 20,000-row transaction, while 4 writers run (15,000 events
// in all) and the large transaction spans several Kafka transactions:
// each refusal aborts the open one and the session resumes inside the
// PostgreSQL transaction from the checkpoint's ordinal; after
// poison.max_attempts the row is quarantined and every other event
// arrives once.
func TestExactlyOncePoisonInLargeTransaction(t *testing.T) {
	t.Parallel()
	maxBytes := "20000"
	f := newFixture(t, fixtureOpts{partitions: 3, topicConfig: map[string]*string{"max.message.bytes": &maxBytes}})
	p := f.start(f.exactlyOnceEnv("WALPOST_POISON_MAX_ATTEMPTS=2", "WALPOST_DELIVERY_TRANSACTION_RECORDS=2000")...)
	waitStreaming(t, p)
	l := newWriterLoad(f, 4, 20, 20*time.Millisecond).start()
	l.waitWritten(t, 3000, time.Minute)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tx, err := f.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	rows := make([][]any, bigTxnRows)
	var big []verify.Expected
	for i := range rows {
		key, payload := fmt.Sprintf("bigp-%d", i), `{"data": "big"}`
		if i == bigTxnRows/2 {
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
	waitTotal(t, l, 15_000)
	expected := append(l.finish(t), big...)
	t.Logf("%d events from 4 writers and %d of the large transaction (its poison row quarantined)", len(expected)-len(big), len(big))
	verifyReadCommitted(t, f, expected, 4*time.Minute)
	if n := logCount(p, "kafka refused a record inside a transaction"); n != 2 {
		t.Errorf("%d refusals logged, want poison.max_attempts = 2", n)
	}
	alive(t, p, "after the quarantine")
}

// dumpCheckpoints logs the last n records of checkpoint topic cp as
// stored (read_uncommitted, markers included): which transaction wrote
// each checkpoint and whether a COMMIT or ABORT marker followed it.
func dumpCheckpoints(t testing.TB, cp string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(cp), kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
	if err != nil {
		t.Logf("checkpoint topic %s: %v", cp, err)
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offs, err := kadm.NewClient(cl).ListEndOffsets(ctx, cp)
	if err != nil {
		t.Logf("checkpoint topic %s: %v", cp, err)
		return
	}
	end, _ := offs.Lookup(cp, 0)
	var lines []string
	for next := int64(0); next < end.Offset && ctx.Err() == nil; {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			next = r.Offset + 1
			line := fmt.Sprintf("offset %d producer %d epoch %d", r.Offset, r.ProducerID, r.ProducerEpoch)
			switch {
			case r.Attrs.IsControl():
				var k kmsg.ControlRecordKey
				_ = k.ReadFrom(r.Key)
				line += fmt.Sprintf(" marker %v", k.Type)
			default:
				line += fmt.Sprintf(" transactional %v %s", r.Attrs.IsTransactional(), r.Value)
			}
			lines = append(lines, line)
		})
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	t.Logf("checkpoint topic %s, end offset %d (leader epoch %d), its last %d records:\n%s", cp, end.Offset, end.LeaderEpoch, len(lines), strings.Join(lines, "\n"))
}
