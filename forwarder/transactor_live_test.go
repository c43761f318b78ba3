package forwarder

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/sink/kafka"
)

// lagEv is an event the server sent lag after its transaction's commit.
func lagEv(key string, commit pglogrepl.LSN, lag time.Duration) *outbox.Event {
	e := ev(key, commit)
	e.CommitTime = time.Unix(1_800_000_000, 0)
	e.SentAt = e.CommitTime.Add(lag)
	return e
}

// txn hands the transactor one PostgreSQL transaction of one event, key
// at commit, sent lag after its commit, ending 0x80 after it.
func (e *liveEnv) txn(key string, commit pglogrepl.LSN, lag time.Duration) {
	e.x.Emit(lagEv(key, commit, lag), checkpoint.Ticket{})
	e.x.Commit(commit + 0x80)
}

// liveEnv runs a transactor whose commits wait for the test (committing,
// release), with delivery.transaction_interval of a minute: only the
// live rule, or a bound, asks for a commit in these tests.
type liveEnv struct {
	s   *fakeTxnSink
	tr  *pauseTracker
	x   *transactor
	ran chan error
	end context.CancelFunc
}

func newLiveEnv(t *testing.T, records int) *liveEnv {
	return newLiveEnvInterval(t, records, time.Minute, nil)
}

func newLiveEnvInterval(t *testing.T, records int, interval time.Duration, commitErr error) *liveEnv {
	t.Helper()
	e := &liveEnv{s: &fakeTxnSink{committing: make(chan struct{}), release: make(chan struct{}), commitErr: commitErr}, tr: &pauseTracker{}, ran: make(chan error, 1)}
	e.x = newTransactor(transactorConfig{Slot: "s", Identity: position.Identity{SystemID: 7, Timeline: 1},
		Interval: interval, Records: records, Timeout: 5 * time.Second, MaxAttempts: 2, Resume: kafka.TxnMark{LSN: 0x100}, DefaultTopic: "t"},
		e.s, e.tr, &refusals{}, newIsolator(isolatorConfig{}, nil, nil, e.tr))
	ctx, cancel := context.WithCancel(context.Background())
	e.end = cancel
	go func() { e.ran <- e.x.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			for range e.s.committing {
			}
		}()
		close(e.s.release)
		<-e.ran
		close(e.s.committing)
		<-drained
	})
	return e
}

// release lets one commit waiting in CommitTxn go on.
func (e *liveEnv) releaseOne(t *testing.T) {
	t.Helper()
	select {
	case e.s.release <- struct{}{}:
	case <-time.After(5 * time.Second):
		t.Fatal("no commit waits to be released")
	}
}

// waitCommitting waits until Run is in CommitTxn.
func (e *liveEnv) waitCommitting(t *testing.T, what string) {
	t.Helper()
	select {
	case <-e.s.committing:
	case <-time.After(5 * time.Second):
		t.Fatalf("no Kafka commit began: %s", what)
	}
}

// idle waits until Run has applied what was queued and commits nothing;
// a commit that begins meanwhile fails the test.
func (e *liveEnv) idle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		select {
		case <-e.s.committing:
			t.Fatalf("one more Kafka commit began (after %d)", len(e.s.commitList()))
		default:
		}
		busy := true
		if e.x.qmu.TryLock() {
			if e.x.mu.TryLock() {
				busy = e.x.committing || e.x.due
				e.x.mu.Unlock()
			}
			e.x.qmu.Unlock()
		}
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the transactor is still committing")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestTransactorCommitsLiveAtTransactionEnd: a stream that follows the
// writers (the server sent each event moments after its commit) commits
// its Kafka transaction at the PostgreSQL transaction's end, without
// waiting out delivery.transaction_interval, and without pausing the
// stream: what it reads during that commit is queued and makes the next
// transaction, one Kafka commit however many PostgreSQL transactions
// arrived meanwhile. A stream draining a backlog (events sent long after
// their commit) commits by the interval and the size bounds only.
func TestTransactorCommitsLiveAtTransactionEnd(t *testing.T) {
	e := newLiveEnv(t, 1000)
	x := e.x
	e.txn("a", 0x200, time.Millisecond)
	e.waitCommitting(t, "a live transaction ended")
	if e.tr.isPaused() {
		t.Fatal("a live commit paused the stream")
	}
	// The stream reads on during the commit: three PostgreSQL
	// transactions, queued.
	for i, lsn := range []pglogrepl.LSN{0x300, 0x400, 0x500} {
		e.txn(string(rune('b'+i)), lsn, time.Millisecond)
	}
	e.releaseOne(t)
	e.waitCommitting(t, "the queued live transactions ended")
	if e.tr.isPaused() {
		t.Fatal("the second live commit paused the stream")
	}
	e.releaseOne(t)
	e.idle(t)
	cps, sizes := e.s.commitList(), e.s.sizeList()
	if len(cps) != 2 || cps[0].LSN != 0x280 || cps[1].LSN != 0x580 || !slices.Equal(sizes, []int{1, 3}) {
		t.Fatalf("commits at %v holding %v records; want 0/280 (1) then one for the three queued, 0/580 (3)", lsns(cps), sizes)
	}
	if e.tr.n() != 4 {
		t.Fatalf("%d tickets done, want 4", e.tr.n())
	}

	// A backlog: the server sent the events two minutes after their
	// commit. Its transaction ends commit nothing.
	e.txn("f", 0x600, 2*time.Minute)
	e.txn("g", 0x700, 2*time.Minute)
	x.mu.Lock()
	due := x.due
	x.mu.Unlock()
	if due || len(e.s.commitList()) != 2 {
		t.Fatalf("a backlog's transaction end asked for a commit (due %v, %d commits)", due, len(e.s.commitList()))
	}
	// Live again: the open transaction (f, g and h) commits at h's end.
	e.txn("h", 0x800, time.Millisecond)
	e.waitCommitting(t, "the stream is live again")
	e.releaseOne(t)
	e.idle(t)
	if cps, sizes := e.s.commitList(), e.s.sizeList(); len(cps) != 3 || cps[2].LSN != 0x880 || sizes[2] != 3 {
		t.Fatalf("commits at %v holding %v records; want a third at 0/880 holding f, g and h", lsns(cps), sizes)
	}
}

// TestTransactorLiveQueueKeepsBounds: the calls queued during a live
// commit never make a transaction larger than delivery.transaction_records:
// the one that fills it is committed there (the stream paused, as for any
// full transaction), and the rest of the queue goes into the next.
func TestTransactorLiveQueueKeepsBounds(t *testing.T) {
	e := newLiveEnv(t, 2)
	e.txn("a", 0x200, time.Millisecond)
	e.waitCommitting(t, "a live transaction ended")
	for i, lsn := range []pglogrepl.LSN{0x300, 0x400, 0x500, 0x600, 0x700} {
		e.txn(string(rune('b'+i)), lsn, time.Millisecond)
	}
	for range 3 {
		e.releaseOne(t)
		e.waitCommitting(t, "the queue holds more")
	}
	e.releaseOne(t)
	e.idle(t)
	if e.tr.isPaused() {
		t.Fatal("the stream is still paused after the queue was applied")
	}
	cps, sizes := e.s.commitList(), e.s.sizeList()
	if !slices.Equal(sizes, []int{1, 2, 2, 1}) || cps[1].LSN != 0x380 || cps[1].PartialCommitLSN != 0x400 || cps[3].LSN != 0x780 {
		t.Fatalf("commits at %v holding %v records; want 1, 2, 2, 1 (at most delivery.transaction_records each)", lsns(cps), sizes)
	}
}

func lsns(cps []kafka.TxnMark) []string {
	var out []string
	for _, c := range cps {
		out = append(out, c.LSN.String())
	}
	return out
}

func (s *fakeTxnSink) sizeList() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.sizes...)
}

// TestTransactorIntervalCommitPauses: a commit that Run's ticker makes
// (a backlog's transaction delivery.transaction_interval old, with no
// PostgreSQL transaction end to ask for it) pauses the stream, as a full
// one does: only a live commit lets it read on.
func TestTransactorIntervalCommitPauses(t *testing.T) {
	e := newLiveEnvInterval(t, 1000, 20*time.Millisecond, nil)
	e.x.Emit(lagEv("a", 0x200, 2*time.Minute), checkpoint.Ticket{})
	e.waitCommitting(t, "the transaction is delivery.transaction_interval old")
	if !e.tr.isPaused() {
		t.Fatal("the stream reads on while Run commits a backlog's transaction")
	}
	e.releaseOne(t)
	e.idle(t)
	if e.tr.isPaused() || e.tr.n() != 1 {
		t.Fatalf("after the commit: paused %v, %d tickets done; want not paused, 1", e.tr.isPaused(), e.tr.n())
	}
}

// TestTransactorLiveQueueAfterFailedCommit: a live commit that fails
// ends the session; the calls queued meanwhile commit nothing, no ticket
// is Done (the next session reads those events again), and the stream is
// not left paused.
func TestTransactorLiveQueueAfterFailedCommit(t *testing.T) {
	broken := errors.New("broker gone")
	e := newLiveEnvInterval(t, 1000, time.Minute, broken)
	x := e.x
	e.txn("a", 0x200, time.Millisecond)
	e.waitCommitting(t, "a live transaction ended")
	e.txn("b", 0x300, time.Millisecond)
	x.Emit(lagEv("c", 0x400, time.Millisecond), checkpoint.Ticket{})
	e.releaseOne(t)
	select {
	case err := <-e.ran:
		e.ran <- err // for the cleanup
		if !errors.Is(err, broken) {
			t.Fatalf("Run: %v, want the commit's failure", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run goes on after its commit failed")
	}
	x.qmu.Lock()
	queued, committing := len(x.queue), x.committing
	x.qmu.Unlock()
	if e.tr.n() != 0 || len(e.s.commitList()) != 0 || e.tr.isPaused() || queued != 0 || committing {
		t.Fatalf("after the failed commit: %d tickets done, %d commits, paused %v, %d queued, committing %v; want 0, 0, false, 0, false",
			e.tr.n(), len(e.s.commitList()), e.tr.isPaused(), queued, committing)
	}
}

// TestTransactorQueueKeepsLastCommit: transaction ends with no event
// between them (PostgreSQL 14 sends one for every transaction of the
// database) queue as one, so the queue grows with the events the
// tracker lets in, not with the database's commit rate; the checkpoint
// names the last end. stop, queued too, ends the session after them.
func TestTransactorQueueKeepsLastCommit(t *testing.T) {
	e := newLiveEnv(t, 1000)
	x := e.x
	e.txn("a", 0x200, time.Millisecond)
	e.waitCommitting(t, "a live transaction ended")
	x.Emit(lagEv("b", 0x300, time.Millisecond), checkpoint.Ticket{})
	for end := pglogrepl.LSN(0x380); end < 0x380+1000*0x10; end += 0x10 {
		x.Commit(end)
	}
	x.qmu.Lock()
	queued := len(x.queue)
	x.qmu.Unlock()
	if queued != 2 {
		t.Fatalf("%d calls queued; want 2 (b, then the last of its 1,000 transaction ends)", queued)
	}
	e.releaseOne(t)
	e.waitCommitting(t, "the queued live transaction ended")
	refuted := errors.New("checkpoint refuted")
	stopped := make(chan struct{})
	go func() { x.stop(refuted); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		t.Fatal("stop waited for the Kafka commit")
	}
	e.releaseOne(t)
	select {
	case err := <-e.ran:
		e.ran <- err
		if !errors.Is(err, refuted) {
			t.Fatalf("Run: %v, want stop's error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run goes on after stop")
	}
	if cps := e.s.commitList(); len(cps) != 2 || cps[1].LSN != 0x380+999*0x10 {
		t.Fatalf("commits at %v; want the second at the last transaction end, %s", lsns(cps), pglogrepl.LSN(0x380+999*0x10))
	}
}
