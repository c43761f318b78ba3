package forwarder

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/poison"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// fakeTxnSink acknowledges every record at once (or fails those whose key
// is in refuse) and records the transaction calls.
type fakeTxnSink struct {
	mu      sync.Mutex
	refuse  map[string]error
	begins  int
	commits []kafka.TxnMark
	staged  []kafka.TxnMark // StageCheckpoint's marks
	ops     []string        // stage, flush and commit, in order
	// stagedRefusal is what StagedRefusal returns.
	stagedRefusal error
	aborts        int
	inTxn         int
	// abortErr is what AbortTxn returns.
	abortErr error
	// committing, when set, receives a value as CommitTxn begins, and
	// CommitTxn waits for release.
	committing chan struct{}
	release    chan struct{}
	// sizes: the records of each committed transaction.
	sizes []int
	// commitErr, when set, is what CommitTxn returns.
	commitErr error
}

func (s *fakeTxnSink) Produce(ev *outbox.Event, a sink.Acker) {
	s.mu.Lock()
	s.inTxn++
	err := s.refuse[ev.IdempotencyKey]
	s.mu.Unlock()
	a.Acked(sink.Result{Topic: "t", Partition: 0}, err)
}
func (s *fakeTxnSink) Flush(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops = append(s.ops, "flush")
	return nil
}
func (s *fakeTxnSink) Close() {}
func (s *fakeTxnSink) BeginTxn() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.begins++
	return nil
}
func (s *fakeTxnSink) StageCheckpoint(_ context.Context, cp kafka.TxnMark) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.staged = append(s.staged, cp)
	s.ops = append(s.ops, "stage")
	return nil
}
func (s *fakeTxnSink) StagedRefusal() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stagedRefusal
}
func (s *fakeTxnSink) CommitTxn(_ context.Context, cp kafka.TxnMark) error {
	if s.committing != nil {
		s.committing <- struct{}{}
		<-s.release
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.commitErr != nil {
		return s.commitErr
	}
	s.commits = append(s.commits, cp)
	s.ops = append(s.ops, "commit")
	s.sizes = append(s.sizes, s.inTxn)
	s.inTxn = 0
	return nil
}
func (s *fakeTxnSink) AbortTxn(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.aborts++
	s.inTxn = 0
	return s.abortErr
}

// listQuarantine keeps the entries put.
type listQuarantine struct {
	mu      sync.Mutex
	entries []poison.Entry
}

func (q *listQuarantine) Put(_ context.Context, e poison.Entry) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.entries = append(q.entries, e)
	return nil
}

func (q *listQuarantine) Entries() []poison.Entry {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]poison.Entry(nil), q.entries...)
}

// countTracker counts Done calls.
type countTracker struct {
	mu   sync.Mutex
	done int
}

func (c *countTracker) Done(checkpoint.Ticket) { c.mu.Lock(); c.done++; c.mu.Unlock() }
func (c *countTracker) SetPaused(bool)         {}
func (c *countTracker) n() int                 { c.mu.Lock(); defer c.mu.Unlock(); return c.done }

func newTestTransactor(s *fakeTxnSink, tr *countTracker, records int, resume kafka.TxnMark) *transactor {
	return newTransactor(transactorConfig{Slot: "s", Identity: position.Identity{SystemID: 7, Timeline: 1},
		Interval: time.Hour, Records: records, Timeout: 5 * time.Second, MaxAttempts: 2, Resume: resume, DefaultTopic: "t"},
		s, tr, &refusals{}, newIsolator(isolatorConfig{}, nil, nil, tr))
}

// sync commits what the stream's calls asked for, as Run does: the tests
// drive the transactor without Run.
func (t *transactor) sync() {
	t.mu.Lock()
	due := t.due
	t.mu.Unlock()
	if due {
		t.commitPaused(context.Background())
	}
}

func ev(key string, commit pglogrepl.LSN) *outbox.Event {
	return &outbox.Event{ID: key, IdempotencyKey: key, Payload: []byte(`{}`), CommitLSN: commit}
}

// TestTransactorConfirmsOnlyAfterCommit (INV-8, INV-9): tickets are Done
// only when the Kafka transaction that holds them committed, and each
// commit carries the position reached, with the ordinal inside a
// PostgreSQL transaction that spans two Kafka transactions.
func TestTransactorConfirmsOnlyAfterCommit(t *testing.T) {
	s, tr := &fakeTxnSink{}, &countTracker{}
	x := newTestTransactor(s, tr, 3, kafka.TxnMark{LSN: 0x100})
	x.Emit(ev("a", 0x200), checkpoint.Ticket{})
	x.sync()
	x.Emit(ev("b", 0x200), checkpoint.Ticket{})
	x.sync()
	if tr.n() != 0 || len(s.commits) != 0 {
		t.Fatalf("before any commit: %d tickets done, %d commits", tr.n(), len(s.commits))
	}
	x.Commit(0x280)
	x.sync()
	x.Emit(ev("c", 0x300), checkpoint.Ticket{}) // third record: commit inside the transaction at 0/300
	x.sync()
	if tr.n() != 3 || len(s.commits) != 1 {
		t.Fatalf("after 3 records: %d tickets done, %d commits; want 3 and 1", tr.n(), len(s.commits))
	}
	want := kafka.TxnMark{Slot: "s", SystemID: 7, Timeline: 1, LSN: 0x280, PartialCommitLSN: 0x300, Ordinal: 1, Anchored: true, AnchorCommitLSN: 0x200}
	if s.commits[0] != want {
		t.Fatalf("checkpoint %+v, want %+v", s.commits[0], want)
	}
	x.Emit(ev("d", 0x300), checkpoint.Ticket{})
	x.sync()
	x.Commit(0x380)
	x.sync()
	if tr.n() != 3 {
		t.Fatalf("%d tickets done before the second commit, want 3", tr.n())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := x.Run(ctx); err != nil { // ctx ended: commits what is open
		t.Fatal(err)
	}
	if tr.n() != 4 || len(s.commits) != 2 || s.commits[1].LSN != 0x380 || s.commits[1].PartialCommitLSN != 0 {
		t.Fatalf("after the final commit: %d done, commits %+v", tr.n(), s.commits)
	}
	// Each checkpoint was staged before its transaction's flush, with the
	// position it commits (one produce round trip per commit).
	if len(s.staged) != len(s.commits) || s.staged[0] != s.commits[0] || s.staged[1] != s.commits[1] {
		t.Fatalf("staged %+v, committed %+v", s.staged, s.commits)
	}
	if got := strings.Join(s.ops, ","); got != "stage,flush,commit,stage,flush,commit" {
		t.Fatalf("sink calls %s, want stage,flush,commit per transaction", got)
	}
}

// TestTransactorResumesOrdinal: after a restart from a partial checkpoint,
// the ordinal of that PostgreSQL transaction goes on from the checkpoint's.
func TestTransactorResumesOrdinal(t *testing.T) {
	s, tr := &fakeTxnSink{}, &countTracker{}
	x := newTestTransactor(s, tr, 2, kafka.TxnMark{LSN: 0x100, PartialCommitLSN: 0x300, Ordinal: 5})
	x.Emit(ev("f", 0x300), checkpoint.Ticket{})
	x.sync()
	x.Emit(ev("g", 0x300), checkpoint.Ticket{})
	x.sync()
	if len(s.commits) != 1 || s.commits[0].PartialCommitLSN != 0x300 || s.commits[0].Ordinal != 7 || s.commits[0].LSN != 0x100 {
		t.Fatalf("commits %+v, want one at 0/100 with ordinal 7 of 0/300", s.commits)
	}
}

// TestTransactorRefusedRecordAborts: a refused record aborts the
// transaction, confirms nothing of it and ends the session; once it was
// refused poison.max_attempts times it is quarantined before it would be
// produced again.
func TestTransactorRefusedRecordAborts(t *testing.T) {
	refused := &sink.Error{Kind: sink.Record, Class: "MESSAGE_TOO_LARGE", Err: errors.New("too large")}
	q := &listQuarantine{}
	shared := &refusals{}
	for attempt := 1; attempt <= 3; attempt++ {
		s, tr := &fakeTxnSink{refuse: map[string]error{"bad": refused}}, &countTracker{}
		x := newTestTransactor(s, tr, 100, kafka.TxnMark{LSN: 0x100})
		x.refused = shared // across sessions, as the Forwarder keeps it
		x.iso = newIsolator(isolatorConfig{}, nil, q, tr)
		x.Emit(ev("ok", 0x200), checkpoint.Ticket{})
		x.sync()
		x.Emit(ev("bad", 0x200), checkpoint.Ticket{})
		x.sync()
		x.Commit(0x280)
		x.sync()
		wait := 5 * time.Second // a failure returns at once
		if attempt > 2 {
			wait = 100 * time.Millisecond // then Run commits what is open
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		err := x.Run(ctx)
		cancel()
		if attempt <= 2 {
			if err == nil || s.aborts != 1 || len(s.commits) != 0 || tr.n() != 0 {
				t.Fatalf("attempt %d: err %v, %d aborts, %d commits, %d done; want an error, 1 abort, nothing committed or done", attempt, err, s.aborts, len(s.commits), tr.n())
			}
			continue
		}
		if err != nil || len(q.Entries()) != 1 || q.Entries()[0].Event.IdempotencyKey != "bad" || len(s.commits) != 1 || tr.n() != 2 {
			t.Fatalf("attempt 3: err %v, quarantined %d, commits %d, done %d; want the bad record quarantined, the rest committed", err, len(q.Entries()), len(s.commits), tr.n())
		}
	}
}

// TestTransactorCheckpointRefusedWithRecords: the records of a
// transaction fail together with its staged checkpoint, which Kafka
// refused for an ACL (before transaction.version 2 a refused partition
// fails everything buffered with it, so either topic may be the refused
// one): the session's error names both, and no record is counted an
// attempt.
func TestTransactorCheckpointRefusedWithRecords(t *testing.T) {
	denied := &sink.Error{Kind: sink.Destination, Class: "TOPIC_AUTHORIZATION_FAILED", Err: errors.New("not authorized")}
	cpErr := errors.New("produce the checkpoint to walpost_checkpoints: grant WRITE on it")
	s, tr := &fakeTxnSink{refuse: map[string]error{"a": denied, "b": denied}, stagedRefusal: cpErr}, &countTracker{}
	x := newTestTransactor(s, tr, 100, kafka.TxnMark{LSN: 0x100})
	x.Emit(ev("a", 0x200), checkpoint.Ticket{})
	x.Emit(ev("b", 0x200), checkpoint.Ticket{})
	x.Commit(0x280)
	x.sync()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := x.Run(ctx); !errors.Is(err, cpErr) || !errors.Is(err, denied) {
		t.Fatalf("Run: %v, want the checkpoint's refusal and the records'", err)
	}
	if len(s.commits) != 0 || s.aborts != 1 || tr.n() != 0 {
		t.Fatalf("%d commits, %d aborts, %d done; want the transaction aborted, nothing done", len(s.commits), s.aborts, tr.n())
	}
	for _, k := range []string{"a", "b"} {
		if r := x.refused.get(eventKey{k, 0x200}); r.n != 0 || r.alone {
			t.Errorf("event %s noted as refused (%+v): the checkpoint was", k, r)
		}
	}
}

// TestTransactorCheckpointAnchor: each checkpoint names the commit LSN and
// time of the last whole transaction with events it covers (also one the
// skipper did not hand on) and the commit time of its partial transaction.
func TestTransactorCheckpointAnchor(t *testing.T) {
	s := &fakeTxnSink{}
	tr := &countTracker{}
	t1 := time.Date(2026, 12, 1, 10, 0, 0, 1000, time.UTC)
	t2, t3 := t1.Add(time.Second), t1.Add(2*time.Second)
	x := newTestTransactor(s, tr, 3, kafka.TxnMark{LSN: 0x100, Anchored: true, AnchorCommitLSN: 0xd0, AnchorCommitTime: t1.Add(-time.Hour)})
	at := func(key string, commit pglogrepl.LSN, ct time.Time) *outbox.Event {
		e := ev(key, commit)
		e.CommitTime = ct
		return e
	}
	x.skipped(at("a1", 0x1d0, t1))
	x.Commit(0x200)
	x.sync()
	x.Emit(at("b1", 0x2d0, t2), checkpoint.Ticket{})
	x.sync()
	x.Emit(at("b2", 0x2d0, t2), checkpoint.Ticket{})
	x.sync()
	x.Commit(0x300)
	x.sync()
	x.Emit(at("c1", 0x3d0, t3), checkpoint.Ticket{}) // the third record commits
	x.sync()
	if len(s.commits) != 1 {
		t.Fatalf("commits %+v, want one", s.commits)
	}
	cp := s.commits[0]
	if !cp.Anchored || cp.LSN != 0x300 || cp.AnchorCommitLSN != 0x2d0 || !cp.AnchorCommitTime.Equal(t2) ||
		cp.PartialCommitLSN != 0x3d0 || !cp.PartialCommitTime.Equal(t3) || cp.Ordinal != 1 {
		t.Errorf("checkpoint %+v: want 0/300 anchored at 0/2D0 (%v), partial 0/3D0 (%v) ordinal 1", cp, t2, t3)
	}
	x.Commit(0x400)
	x.sync()
	for _, k := range []string{"d1", "d2", "d3"} {
		x.Emit(at(k, 0x4d0, t3.Add(time.Second)), checkpoint.Ticket{})
		x.sync()
	}
	if cp := s.commits[len(s.commits)-1]; cp.LSN != 0x400 || cp.AnchorCommitLSN != 0x3d0 || !cp.AnchorCommitTime.Equal(t3) || cp.PartialCommitLSN != 0x4d0 || cp.Ordinal != 3 {
		t.Errorf("checkpoint %+v: want 0/400 anchored at 0/3D0, partial 0/4D0 ordinal 3", cp)
	}
	// A session that skipped a whole transaction and committed nothing
	// else names the skipped one.
	y := newTestTransactor(s, tr, 1, kafka.TxnMark{LSN: 0x100})
	y.skipped(at("a1", 0x1d0, t1))
	y.Commit(0x200)
	y.sync()
	y.Emit(at("b1", 0x2d0, t2), checkpoint.Ticket{})
	y.sync()
	if cp := s.commits[len(s.commits)-1]; cp.LSN != 0x200 || cp.AnchorCommitLSN != 0x1d0 || !cp.AnchorCommitTime.Equal(t1) {
		t.Errorf("checkpoint %+v: want 0/200 anchored at the skipped 0/1D0", cp)
	}
}

// TestTransactorFencedAtAbort: on Kafka 4 a fenced producer's records fail
// with INVALID_PRODUCER_EPOCH, which alone is not fencing; the abort that
// follows answers PRODUCER_FENCED, and that ends the session as fenced
// (kafka.ErrFenced), so the session can tell a takeover from a retry.
func TestTransactorFencedAtAbort(t *testing.T) {
	s := &fakeTxnSink{refuse: map[string]error{"a": kerr.InvalidProducerEpoch}, abortErr: fmt.Errorf("abort the kafka transaction: %w: %w", kafka.ErrFenced, kerr.ProducerFenced)}
	x := newTestTransactor(s, &countTracker{}, 1, kafka.TxnMark{LSN: 0x100})
	x.Emit(ev("a", 0x1d0), checkpoint.Ticket{})
	x.sync()
	if err := x.failure(); !errors.Is(err, kafka.ErrFenced) {
		t.Errorf("session error %v, want kafka.ErrFenced from the abort", err)
	}
	s = &fakeTxnSink{refuse: map[string]error{"a": kerr.InvalidProducerEpoch}}
	x = newTestTransactor(s, &countTracker{}, 1, kafka.TxnMark{LSN: 0x100})
	x.Emit(ev("a", 0x1d0), checkpoint.Ticket{})
	x.sync()
	if err := x.failure(); err == nil || errors.Is(err, kafka.ErrFenced) {
		t.Errorf("session error %v, want a retried error (the abort succeeded)", err)
	}
}

// TestTransactorReportsDataLoss: franz-go calls no data-loss hook for a
// transactional producer; an ack with OUT_OF_ORDER_SEQUENCE_NUMBER or
// UNKNOWN_PRODUCER_ID is Kafka's word that acknowledged records are gone,
// and the transactor reports it (walpost_kafka_data_loss_total, the
// session ends with errDataLoss).
func TestTransactorReportsDataLoss(t *testing.T) {
	for _, kerrv := range []error{kerr.OutOfOrderSequenceNumber, kerr.UnknownProducerID} {
		s := &fakeTxnSink{refuse: map[string]error{"a": kerrv}}
		x := newTestTransactor(s, &countTracker{}, 1, kafka.TxnMark{LSN: 0x100})
		var lost []string
		x.cfg.OnDataLoss = func(topic string, partition int32) { lost = append(lost, fmt.Sprintf("%s/%d", topic, partition)) }
		x.Emit(ev("a", 0x1d0), checkpoint.Ticket{})
		x.sync()
		if len(lost) != 1 || lost[0] != "t/0" {
			t.Errorf("%v: data loss reported %v, want t/0 once", kerrv, lost)
		}
	}
}

// pauseTracker counts Done calls and records the pauses.
type pauseTracker struct {
	countTracker
	pmu    sync.Mutex
	paused bool
}

func (p *pauseTracker) SetPaused(v bool) { p.pmu.Lock(); p.paused = v; p.pmu.Unlock() }
func (p *pauseTracker) isPaused() bool   { p.pmu.Lock(); defer p.pmu.Unlock(); return p.paused }

// TestTransactorStreamNeverWaitsForCommit (INV-6): while Run commits (a
// flush and an EndTxn that may take as long as kafka.flush_timeout) the
// stream is paused, and a call of the stream that came meanwhile (it read
// the message before it saw the pause) returns at once: it is queued and
// applied, in order, in the next transaction once the commit is done. The
// stream blocked in it could not answer the server, whose
// wal_sender_timeout would end the session.
func TestTransactorStreamNeverWaitsForCommit(t *testing.T) {
	s := &fakeTxnSink{committing: make(chan struct{}), release: make(chan struct{})}
	tr := &pauseTracker{}
	x := newTransactor(transactorConfig{Slot: "s", Identity: position.Identity{SystemID: 7, Timeline: 1},
		Interval: time.Hour, Records: 2, Timeout: 5 * time.Second, MaxAttempts: 2, Resume: kafka.TxnMark{LSN: 0x100}, DefaultTopic: "t"},
		s, tr, &refusals{}, newIsolator(isolatorConfig{}, nil, nil, tr))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- x.Run(ctx) }()

	x.Emit(ev("a", 0x200), checkpoint.Ticket{})
	x.Emit(ev("b", 0x200), checkpoint.Ticket{}) // the transaction is full: Run commits it
	<-s.committing
	if !tr.isPaused() {
		t.Fatal("the stream is not paused while Run commits")
	}
	done := make(chan struct{})
	go func() {
		x.Commit(0x280)
		x.Emit(ev("c", 0x300), checkpoint.Ticket{})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("the stream's Commit and Emit waited for the Kafka commit")
	}
	close(s.release)
	go func() {
		for range s.committing { // later commits go through
		}
	}()
	waitUntil := time.Now().Add(5 * time.Second)
	for tr.isPaused() || s.inTxnCount() != 1 {
		if time.Now().After(waitUntil) {
			t.Fatalf("after the commit: paused %v, %d records in the next transaction; want not paused and c in it", tr.isPaused(), s.inTxnCount())
		}
		time.Sleep(time.Millisecond)
	}
	if len(s.commitList()) != 1 || tr.n() != 2 {
		t.Fatalf("%d commits, %d tickets done; want the first transaction's 1 and 2", len(s.commitList()), tr.n())
	}
	// The queued Commit(0x280) moved the position the next checkpoint names.
	x.Emit(ev("d", 0x300), checkpoint.Ticket{})
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if cps := s.commitList(); len(cps) < 2 || cps[1].LSN != 0x280 || cps[1].PartialCommitLSN != 0x300 || cps[1].Ordinal != 2 {
		t.Fatalf("checkpoints %+v, want the second at 0/280 with 2 events of 0/300", cps)
	}
}

func (s *fakeTxnSink) inTxnCount() int { s.mu.Lock(); defer s.mu.Unlock(); return s.inTxn }
func (s *fakeTxnSink) commitList() []kafka.TxnMark {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]kafka.TxnMark(nil), s.commits...)
}
