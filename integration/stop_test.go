package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/walpost/walpost/verify"
)

// TestStopDuringIsolation: SIGTERM while the isolator waits poison.backoff
// before re-sending an oversized record whose transaction neighbours Kafka
// acknowledged. The stop finishes the isolation (the record quarantined,
// the events held behind it sent), so the transaction is confirmed; walpost
// exits within kafka.flush_timeout and a margin; after a restart every
// event is in the topic exactly once and there is one poison row.
func TestStopDuringIsolation(t *testing.T) {
	f := newFixture(t, fixtureOpts{partitions: 1, topicConfig: map[string]*string{"max.message.bytes": ptr("4096")}})
	const flushTimeout = 15 * time.Second
	// Attempt 1 fails, the re-send at once fails, then a 4 s backoff
	// before the third and last attempt: the stop comes in that backoff.
	env := []string{"WALPOST_POISON_MAX_ATTEMPTS=3", "WALPOST_POISON_BACKOFF=4s",
		"WALPOST_KAFKA_FLUSH_TIMEOUT=" + flushTimeout.String()}
	p := f.start(env...)
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not stream")
	}
	ctx := context.Background()
	var expected []verify.Expected
	tx, err := f.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		key, payload := fmt.Sprintf("n-%d", i), `{"n": 1}`
		if i == 2 {
			key, payload = "big", oversized("big")
		} else {
			expected = append(expected, verify.Expected{Key: key, Txn: "first", Index: i})
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES ($1, $2)`, f.Table), key, payload); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !p.waitLog("attempt=2", time.Minute) {
		t.Fatal("the oversized record was not re-sent alone a second time (no attempt=2)")
	}
	// Written while the isolator holds new events.
	after, err := f.writeTxn(ctx, "after", []string{"after-0", "after-1"}, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	expected = append(expected, after...)
	took, err := p.signal(syscall.SIGTERM, flushTimeout+30*time.Second)
	t.Logf("SIGTERM during the backoff: exited after %s (%v)", took.Round(time.Millisecond), err)
	if err != nil {
		t.Fatalf("walpost after SIGTERM during isolation: %v", err)
	}
	// The final status update and the last position write (≤ 5 s each)
	// come after the drain.
	if limit := flushTimeout + 10*time.Second; took > limit {
		t.Errorf("walpost took %s to stop, want at most kafka.flush_timeout + 10 s = %s", took.Round(time.Millisecond), limit)
	}
	log, _ := os.ReadFile(p.log)
	if !strings.Contains(string(log), "event quarantined in the poison table") {
		t.Errorf("the first process stopped without finishing the isolation (no quarantine in its log)")
	}

	p2 := f.start(env...)
	if !p2.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not stream after the restart")
	}
	recs := f.consumeAll(t, len(expected), 2*time.Minute)
	rep := verify.Validate(expected, observed(recs))
	t.Logf("validator: %s", rep)
	if !rep.OK() || rep.Delivered != len(expected) || rep.Duplicates() != 0 || rep.Unexpected != 0 {
		t.Fatalf("after a stop during isolation and a restart: %s; duplicated %v", rep, rep.Duplicated)
	}
	if n := f.poisonCount(t); n != 1 {
		t.Fatalf("%d poison rows, want exactly one (the oversized record)", n)
	}
	if _, err := p2.signal(syscall.SIGTERM, flushTimeout+30*time.Second); err != nil {
		t.Fatalf("second walpost after SIGTERM: %v", err)
	}
}

// TestStopDrainsWithinFlushTimeout: a stop that cannot finish the
// isolation (poison.backoff 30 s, kafka.flush_timeout 8 s) in the middle of
// the refused record's transaction ends within one kafka.flush_timeout:
// reading to the transaction's commit, waiting for in-flight events and
// the final flush share one deadline. Nothing is confirmed past the
// record: a restart quarantines it and delivers the rest.
func TestStopDrainsWithinFlushTimeout(t *testing.T) {
	f := newFixture(t, fixtureOpts{partitions: 1, topicConfig: map[string]*string{"max.message.bytes": ptr("4096")}})
	const flushTimeout = 8 * time.Second
	p := f.start("WALPOST_POISON_MAX_ATTEMPTS=3", "WALPOST_POISON_BACKOFF=30s",
		"WALPOST_KAFKA_FLUSH_TIMEOUT="+flushTimeout.String())
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not stream")
	}
	ctx := context.Background()
	keys := []string{"n-0", "big", "n-2"}
	tx, err := f.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var expected []verify.Expected
	for i, key := range keys {
		payload := `{"n": 1}`
		if key == "big" {
			payload = oversized("big")
		} else {
			expected = append(expected, verify.Expected{Key: key, Txn: "first", Index: i})
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES ($1, $2)`, f.Table), key, payload); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !p.waitLog("attempt=2", time.Minute) {
		t.Fatal("the oversized record was not re-sent alone a second time (no attempt=2)")
	}
	took, err := p.signal(syscall.SIGTERM, 4*flushTimeout)
	t.Logf("SIGTERM during a backoff longer than kafka.flush_timeout: exited after %s (%v)", took.Round(time.Millisecond), err)
	if err != nil {
		t.Fatalf("walpost after SIGTERM: %v", err)
	}
	// One flush_timeout, then the final status update and teardown
	// (milliseconds unless the machine is loaded); a deadline per drain
	// step made it two, 16 s.
	if limit := flushTimeout + 6*time.Second; took > limit {
		t.Errorf("walpost took %s to stop, want at most kafka.flush_timeout + 6 s = %s (one deadline for the whole drain)", took.Round(time.Millisecond), limit)
	}
	if took < flushTimeout-time.Second {
		t.Errorf("walpost stopped after %s, before kafka.flush_timeout (%s), with the isolation unfinished", took.Round(time.Millisecond), flushTimeout)
	}
	if n := f.poisonCount(t); n != 0 {
		t.Fatalf("%d poison rows after the first process, want none (its backoff outlasted the stop)", n)
	}

	p2 := f.start("WALPOST_POISON_MAX_ATTEMPTS=3", "WALPOST_POISON_BACKOFF=10ms")
	if !p2.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not stream after the restart")
	}
	recs := f.consumeAll(t, len(expected), 2*time.Minute)
	rep := verify.Validate(expected, observed(recs))
	t.Logf("validator (at-least-once: the first process stopped mid-isolation): %s", rep)
	if !rep.OK() || rep.Delivered != len(expected) || rep.Unexpected != 0 {
		t.Fatalf("after a stop that timed out and a restart: %s", rep)
	}
	waitFor(t, time.Minute, "the oversized record quarantined after the restart", func() bool { return f.poisonCount(t) == 1 })
	if _, err := p2.signal(syscall.SIGTERM, 4*flushTimeout); err != nil {
		t.Fatalf("second walpost after SIGTERM: %v", err)
	}
}
