package forwarder

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// TxnSink is what the transactor needs of a transactional sink
// (sink/kafka.Sink with a TransactionalID).
type TxnSink interface {
	sink.Sink
	BeginTxn() error
	CommitTxn(ctx context.Context, cp kafka.Checkpoint) error
	AbortTxn(ctx context.Context) error
}

// eventKey is an event's identity across sessions (INV-2: outbox id and
// commit LSN, never the key alone).
type eventKey struct {
	id  string
	lsn pglogrepl.LSN
}

// refusals counts, per event, the record-level failures Kafka gave it in
// exactly-once mode, across the sessions of one process: each aborts the
// Kafka transaction and ends the session, so the isolator's in-session
// retry cannot run (DESIGN.md, "Exactly-once delivery", Poison).
type refusals struct {
	mu sync.Mutex
	m  map[eventKey]refusal
}

type refusal struct {
	n     int
	err   error
	class string
}

func (r *refusals) add(k eventKey, err error, class string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[eventKey]refusal{}
	}
	x := r.m[k]
	x.n++
	x.err, x.class = err, class
	r.m[k] = x
	return x.n
}

func (r *refusals) get(k eventKey) refusal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[k]
}

func (r *refusals) forget(k eventKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, k)
}

// transactorConfig configures a transactor.
type transactorConfig struct {
	Slot        string
	Identity    position.Identity
	Interval    time.Duration // delivery.transaction_interval
	Records     int           // delivery.transaction_records
	Bytes       int64         // half of pipeline.max_inflight_bytes
	Timeout     time.Duration // bound of one flush + commit or abort
	MaxAttempts int           // poison.max_attempts
	// Resume is the checkpoint read at start: the ordinal of its partial
	// transaction goes on from there.
	Resume       kafka.Checkpoint
	DefaultTopic string
	Logger       *slog.Logger
	OnCommit     func(outcome string, records int)
	OnAck        func(topic string, commit time.Time, produceLatency time.Duration, now time.Time)
}

// transactor is the stream's handler in exactly-once mode: it puts events
// into Kafka transactions and commits each with the checkpoint record of
// the position it reaches; tickets are Done only after that commit
// (INV-8). Emit, Commit and the ticker's commits hold mu; acks take only
// amu.
type transactor struct {
	cfg     transactorConfig
	sink    TxnSink
	tracker Tracker
	refused *refusals
	iso     *Isolator       // its quarantine and breaker only
	ctx     context.Context // the session's isolator context, for poison writes

	mu    sync.Mutex
	open  bool
	began time.Time
	n     int
	bytes int64
	lsn   pglogrepl.LSN // end of the last PostgreSQL transaction seen whole
	cur   pglogrepl.LSN // commit LSN of the transaction being emitted (0 between)
	ord   int           // its events handled so far, counting earlier sessions'
	// The checkpoint's anchor (kafka.Checkpoint): the commit LSN and time
	// of the transaction being emitted, of the last one with events seen
	// (emitted or skipped) since the last Commit, and of the last whole
	// one with events.
	curTime    time.Time
	seen       pglogrepl.LSN
	seenTime   time.Time
	anchor     pglogrepl.LSN
	anchorTime time.Time
	err        error // the failure that ends the session (sticky)

	amu    sync.Mutex
	acked  []txnAck
	ackErr error
	ackEv  *outbox.Event

	fail chan struct{}
}

// newTransactor wires a transactor; its ctx (for poison writes) is set
// before Run starts.
func newTransactor(cfg transactorConfig, s TxnSink, tracker Tracker, refused *refusals, iso *Isolator) *transactor {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &transactor{cfg: cfg, sink: s, tracker: tracker, refused: refused, iso: iso, ctx: context.Background(),
		lsn: cfg.Resume.LSN, anchor: cfg.Resume.AnchorCommitLSN, anchorTime: cfg.Resume.AnchorCommitTime, fail: make(chan struct{}, 1)}
}

// txnAck is one produced event's outcome receiver.
type txnAck struct {
	t      *transactor
	ev     *outbox.Event
	ticket checkpoint.Ticket
	start  time.Time
}

// Acked records the outcome; the ticket is Done at the commit.
func (a txnAck) Acked(_ sink.Result, err error) {
	t := a.t
	t.amu.Lock()
	if err == nil {
		t.acked = append(t.acked, a)
	} else if t.ackErr == nil {
		t.ackErr, t.ackEv = err, a.ev
	}
	t.amu.Unlock()
	if err != nil {
		select {
		case t.fail <- struct{}{}:
		default:
		}
	}
}

// Emit puts ev into the open Kafka transaction (beginning one), or
// quarantines it first when Kafka refused it poison.max_attempts times.
func (t *transactor) Emit(ev *outbox.Event, tk checkpoint.Ticket) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return // the session ends; the event is not confirmed, the next session reads it again
	}
	t.seen, t.seenTime = ev.CommitLSN, ev.CommitTime
	if ev.CommitLSN != t.cur {
		t.cur, t.ord, t.curTime = ev.CommitLSN, 0, ev.CommitTime
		if ev.CommitLSN == t.cfg.Resume.PartialCommitLSN {
			t.ord = t.cfg.Resume.Ordinal
		}
	}
	key := eventKey{ev.ID, ev.CommitLSN}
	if r := t.refused.get(key); r.n >= t.cfg.MaxAttempts {
		// INV-12: the poison row is committed before any checkpoint past
		// the event can be.
		topic := ev.Topic
		if topic == "" {
			topic = t.cfg.DefaultTopic
		}
		if err := t.iso.quarantine(t.ctx, item{ev: ev, ticket: tk}, topic, r.n, r.err, r.class); err != nil {
			t.failLocked(err)
			return
		}
		t.refused.forget(key)
		t.ord++
		return
	}
	if !t.open {
		if err := t.sink.BeginTxn(); err != nil {
			t.failLocked(err)
			return
		}
		t.open, t.began = true, time.Now()
	}
	start := ev.ReceivedAt
	if start.IsZero() {
		start = time.Now()
	}
	t.sink.Produce(ev, txnAck{t: t, ev: ev, ticket: tk, start: start})
	t.ord++
	t.n++
	t.bytes += int64(len(ev.Payload))
	if t.n >= t.cfg.Records || (t.cfg.Bytes > 0 && t.bytes >= t.cfg.Bytes) {
		t.commitLocked()
	}
}

// skipped notes an event the skipper did not hand on: its transaction is
// the checkpoint's anchor once it ended.
func (t *transactor) skipped(ev *outbox.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seen, t.seenTime = ev.CommitLSN, ev.CommitTime
}

// stop ends the session with err (the skipper found the checkpoint does
// not match the server's WAL).
func (t *transactor) stop(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failLocked(err)
}

// Commit notes the end of a PostgreSQL transaction: its events are all
// emitted, so a checkpoint may name its end.
func (t *transactor) Commit(end pglogrepl.LSN) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lsn, t.cur, t.ord = end, 0, 0
	if t.seen != 0 {
		t.anchor, t.anchorTime, t.seen = t.seen, t.seenTime, 0
	}
	if t.err == nil && t.open && time.Since(t.began) >= t.cfg.Interval {
		t.commitLocked()
	}
}

// Run commits the open transaction once it is delivery.transaction_interval
// old (also while the stream is paused by the tracker's limits), ends the
// session on a failure, and commits what is open when ctx ends.
func (t *transactor) Run(ctx context.Context) error {
	every := max(t.cfg.Interval/4, 5*time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			t.mu.Lock()
			defer t.mu.Unlock()
			if t.err == nil {
				t.commitLocked()
			}
			return t.err
		case <-t.fail:
		case <-tick.C:
		}
		t.mu.Lock()
		if t.err == nil {
			t.amu.Lock()
			failed := t.ackErr != nil
			t.amu.Unlock()
			if failed || (t.open && time.Since(t.began) >= t.cfg.Interval) {
				t.commitLocked()
			}
		}
		err := t.err
		t.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// commitLocked flushes the open transaction and commits it with the
// checkpoint of the position it reaches; then, and only then, its tickets
// are Done (INV-8). Any failure aborts it and ends the session.
func (t *transactor) commitLocked() {
	if !t.open {
		return
	}
	// Not the session's context: a cancelled EndTransaction leaves its
	// outcome unknown (franz-go's advice).
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.Timeout)
	defer cancel()
	if err := t.sink.Flush(ctx); err != nil {
		t.failLocked(fmt.Errorf("flush the kafka transaction: %w", err))
		return
	}
	t.amu.Lock()
	ackErr, ackEv, acked := t.ackErr, t.ackEv, t.acked
	t.acked = nil
	t.amu.Unlock()
	if ackErr != nil {
		t.failLocked(t.refusal(ackErr, ackEv))
		return
	}
	// INV-9: the checkpoint names what this transaction's records reach.
	cp := kafka.Checkpoint{Slot: t.cfg.Slot, SystemID: t.cfg.Identity.SystemID, Timeline: t.cfg.Identity.Timeline, LSN: t.lsn,
		Anchored: true, AnchorCommitLSN: t.anchor, AnchorCommitTime: t.anchorTime}
	if t.cur != 0 && t.ord > 0 {
		cp.PartialCommitLSN, cp.PartialCommitTime, cp.Ordinal = t.cur, t.curTime, t.ord
	}
	if err := t.sink.CommitTxn(ctx, cp); err != nil {
		t.failLocked(fmt.Errorf("%w (the outcome may be unknown: the transaction is aborted, and the next session reads the checkpoint again and resumes from what committed)", err))
		return
	}
	t.open, t.n, t.bytes = false, 0, 0
	now := time.Now()
	for _, a := range acked {
		t.tracker.Done(a.ticket) // INV-8
		if t.cfg.OnAck != nil {
			t.cfg.OnAck(a.ev.Topic, a.ev.CommitTime, now.Sub(a.start), now)
		}
	}
	if t.cfg.OnCommit != nil {
		t.cfg.OnCommit("committed", len(acked))
	}
}

// refusal turns a record's failure into the session's error, counting a
// record-level refusal for the event (it is quarantined once it reached
// poison.max_attempts).
func (t *transactor) refusal(err error, ev *outbox.Event) error {
	topic := ev.Topic
	if topic == "" {
		topic = t.cfg.DefaultTopic
	}
	if kafka.Fenced(err) {
		return fmt.Errorf("event %q: %w: %w", ev.IdempotencyKey, kafka.ErrFenced, err)
	}
	kind, class := sink.KindOf(err)
	switch kind {
	case sink.Record:
		n := t.refused.add(eventKey{ev.ID, ev.CommitLSN}, err, class)
		t.cfg.Logger.Warn("kafka refused a record inside a transaction; the transaction is aborted and the session restarts from the checkpoint",
			"idempotency_key", ev.IdempotencyKey, "topic", topic, "error_class", class, "attempt", n, "max_attempts", t.cfg.MaxAttempts, "err", err.Error())
		return fmt.Errorf("kafka refused event %q on topic %q (%s, attempt %d of %d); the transaction is aborted: %w",
			ev.IdempotencyKey, topic, class, n, t.cfg.MaxAttempts, err)
	case sink.Destination:
		return &DestinationError{Key: ev.IdempotencyKey, Topic: topic, Class: class, Err: err}
	}
	return fmt.Errorf("kafka failed event %q on topic %q (%s, %s); the transaction is aborted and the session restarts from the checkpoint: %w",
		ev.IdempotencyKey, topic, kind, class, err)
}

// failLocked ends the session with err: the open transaction is aborted
// (never by a fenced producer: re-initialising would fence the other one
// in turn), its tickets are never Done.
func (t *transactor) failLocked(err error) {
	if t.err != nil {
		return
	}
	t.err = err
	if t.open && !kafka.Fenced(err) {
		ctx, cancel := context.WithTimeout(context.Background(), t.cfg.Timeout)
		if aerr := t.sink.AbortTxn(ctx); aerr != nil {
			t.cfg.Logger.Warn("cannot abort the kafka transaction; the next session's producer aborts it when it initialises", "slot", t.cfg.Slot, "err", aerr.Error())
		}
		cancel()
	}
	if t.open && t.cfg.OnCommit != nil {
		t.cfg.OnCommit("aborted", t.n)
	}
	t.open = false
	t.amu.Lock()
	t.acked = nil
	t.amu.Unlock()
	select {
	case t.fail <- struct{}{}:
	default:
	}
}

// failure is the error that ended the session, if any.
func (t *transactor) failure() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}
