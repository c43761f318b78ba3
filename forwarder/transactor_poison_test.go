package forwarder

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/poison"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// stallingQuarantine fails every Put with a transient error (the
// isolator retries it) until released, and counts the attempts.
type stallingQuarantine struct {
	listQuarantine
	mu       sync.Mutex
	stalled  bool
	attempts int
}

func (q *stallingQuarantine) Put(ctx context.Context, e poison.Entry) error {
	q.mu.Lock()
	q.attempts++
	stalled := q.stalled
	q.mu.Unlock()
	if stalled {
		return errors.New("write the poison row: connection refused (injected)")
	}
	return q.listQuarantine.Put(ctx, e)
}

func (q *stallingQuarantine) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stalled = false
}

func (q *stallingQuarantine) tries() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.attempts
}

// TestTransactorPoisonWriteHoldsNoTransaction (review 2026-12, finding
// 8): while the poison row of an event that reached poison.max_attempts
// cannot be written and its write is retried, no Kafka transaction is
// open (the one holding the records before the event committed first, so
// the broker cannot time it out) and the transactor's lock is free (the
// ticker and the session's end are not stuck behind the retries). Once
// the row is written the event counts in the ordinal of the next
// checkpoint (INV-12: never a checkpoint past it before its row).
func TestTransactorPoisonWriteHoldsNoTransaction(t *testing.T) {
	s, tr := &fakeTxnSink{}, &countTracker{}
	x := newTestTransactor(s, tr, 100, kafka.TxnMark{LSN: 0x100})
	q := &stallingQuarantine{stalled: true}
	x.iso = newIsolator(isolatorConfig{Backoff: time.Millisecond, DefaultTopic: "t"}, nil, q, tr)
	refused := &sink.Error{Kind: sink.Record, Class: "INVALID_RECORD", Err: errors.New("invalid record")}
	for range x.cfg.MaxAttempts {
		x.refused.add(eventKey{"bad", 0x200}, refused, "INVALID_RECORD")
	}

	x.Emit(ev("a", 0x200), checkpoint.Ticket{}) // begins a transaction
	emitted := make(chan struct{})
	go func() {
		defer close(emitted)
		x.Emit(ev("bad", 0x200), checkpoint.Ticket{})
	}()
	defer func() { q.release(); <-emitted }()
	for deadline := time.Now().Add(5 * time.Second); q.tries() < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d poison writes tried, want the write retried", q.tries())
		}
	}
	free := make(chan struct{})
	go func() {
		defer close(free)
		_ = x.failure() // takes the transactor's lock
	}()
	select {
	case <-free:
	case <-time.After(2 * time.Second):
		t.Fatal("the transactor's lock is held while the poison row's write is retried")
	}
	s.mu.Lock()
	commits, begins := len(s.commits), s.begins
	s.mu.Unlock()
	if commits != 1 || begins != 1 || tr.n() != 1 {
		t.Fatalf("while the poison row's write is retried: %d begun, %d committed, %d tickets done; want the transaction holding a committed (1, 1, 1) and none open",
			begins, commits, tr.n())
	}

	q.release()
	<-emitted
	if e := q.Entries(); len(e) != 1 || e[0].Event.IdempotencyKey != "bad" || tr.n() != 2 {
		t.Fatalf("quarantined %d (%v), %d tickets done; want bad quarantined and done", len(e), e, tr.n())
	}
	x.Emit(ev("c", 0x200), checkpoint.Ticket{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := x.Run(ctx); err != nil { // commits what is open
		t.Fatal(err)
	}
	if len(s.commits) != 2 || s.commits[0].Ordinal != 1 || s.commits[1].Ordinal != 3 || tr.n() != 3 {
		t.Fatalf("checkpoints %+v, %d done; want ordinals 1 (before bad's row) then 3, every ticket done", s.commits, tr.n())
	}
}
