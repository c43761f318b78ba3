package forwarder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// txnSink is what the transactor needs of a transactional sink
// (sink/kafka.Sink with a TransactionalID).
type txnSink interface {
	sink.Sink
	BeginTxn() error
	StageCheckpoint(ctx context.Context, cp kafka.TxnMark) error
	StagedRefusal() error
	CommitTxn(ctx context.Context, cp kafka.TxnMark) error
	AbortTxn(ctx context.Context) error
}

// eventKey is an event's identity across sessions (INV-2: outbox id and
// commit LSN, never the key alone).
type eventKey struct {
	id  string
	lsn pglogrepl.LSN
}

// refusals remembers, per event, the record-level failures Kafka gave it
// in exactly-once mode, across the sessions of one process: each aborts
// the Kafka transaction and ends the session, so the isolator's
// in-session retry cannot run (DESIGN.md, "Exactly-once delivery",
// Poison). The broker refuses a whole batch, and franz-go then fails
// every buffered record of the partition with its error
// (recBuf.failAllRecords): only a failure that is the record's own counts
// an attempt (add); the records that failed together are suspects
// (suspect), produced alone by the next sessions until the one Kafka
// refuses alone is found, as the isolator re-sends them one at a time.
type refusals struct {
	mu sync.Mutex
	m  map[eventKey]refusal
}

type refusal struct {
	n     int   // failures that were the record's own (poison.max_attempts counts these)
	err   error // the last failure
	class string
	// alone: the record failed inside a transaction (with others or
	// alone), so it is produced in a batch of its own until Kafka takes
	// it or it is quarantined.
	alone bool
}

// add counts a failure that is the record's own: the sink reported it on
// the record itself, or the record failed alone in its partition.
func (r *refusals) add(k eventKey, err error, class string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[eventKey]refusal{}
	}
	x := r.m[k]
	x.n++
	x.err, x.class, x.alone = err, class, true
	r.m[k] = x
	return x.n
}

// suspect notes a record that failed together with others of its
// partition: no attempt is counted, and it is produced alone next time.
func (r *refusals) suspect(k eventKey, err error, class string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[eventKey]refusal{}
	}
	x := r.m[k]
	x.err, x.class, x.alone = err, class, true
	r.m[k] = x
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
	Resume       kafka.TxnMark
	DefaultTopic string
	Logger       *slog.Logger
	OnCommit     func(outcome string, records int)
	OnAck        func(topic string, commit time.Time, produceLatency time.Duration, now time.Time)
	// OnDataLoss is told of an ack that says Kafka lost records it had
	// acknowledged (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID):
	// franz-go calls its data-loss hook for non-transactional producers
	// only.
	OnDataLoss func(topic string, partition int32)
}

// transactor is the stream's handler in exactly-once mode: it puts events
// into Kafka transactions and commits each with the checkpoint record of
// the position it reaches; tickets are Done only after that commit
// (INV-8). Emit, Commit and the ticker's commits hold mu (Emit releases
// it while a poison row is written, with no transaction open:
// quarantineLocked); acks take only amu.
type transactor struct {
	cfg     transactorConfig
	sink    txnSink
	tracker eventSettler
	refused *refusals
	iso     *isolator       // its quarantine and breaker only
	ctx     context.Context // the session's isolator context, for poison writes

	mu    sync.Mutex
	open  bool
	began time.Time
	n     int
	bytes int64
	lsn   pglogrepl.LSN // end of the last PostgreSQL transaction seen whole
	cur   pglogrepl.LSN // commit LSN of the transaction being emitted (0 between)
	ord   int           // its events handled so far, counting earlier sessions'
	// The checkpoint's anchor (kafka.TxnMark): the commit LSN and time
	// of the transaction being emitted, of the last one with events seen
	// (emitted or skipped) since the last Commit, and of the last whole
	// one with events.
	curTime time.Time
	// live: the last event emitted was sent by the server less than
	// delivery.transaction_interval after its commit (the stream follows
	// the writers, it is not draining a backlog): the open transaction
	// commits at the next PostgreSQL transaction end, without pausing the
	// stream, so what arrives during that commit makes the next one.
	live       bool
	seen       pglogrepl.LSN
	seenTime   time.Time
	anchor     pglogrepl.LSN
	anchorTime time.Time
	err        error // the failure that ends the session (sticky)

	// quarantined are the events quarantined since the last commit: they
	// are forgotten by refused once a checkpoint past them committed (a
	// session that ends before reads them again and quarantines them
	// again; the poison row's identity makes that a no-op).
	quarantined []eventKey

	amu    sync.Mutex
	acked  []txnAck
	failed []txnFailure // in the order of the acks

	fail chan struct{}
	// due: the stream asked for a commit (the transaction is full, or old
	// at a PostgreSQL commit, or live at one); Run commits it. A full or
	// old transaction commits with the stream paused (tracker.SetPaused:
	// it keeps sending status updates however long the flush and EndTxn
	// take, INV-6); a live one with the stream reading on, its calls
	// queued. soon: the due commit is a live one. paused: the transactor
	// holds the stream's pause. kick wakes Run.
	due    bool
	soon   bool
	paused bool
	kick   chan struct{}

	// committing: Run commits (flush, EndTxn), with the stream paused
	// unless the commit is a live one; the stream's calls that come
	// meanwhile (Emit, Commit, skipped, stop) wait in queue, not on mu,
	// and Run applies them in order once the commit is done. Consecutive
	// Commits with nothing between them are kept as the last one, so the
	// queue holds at most about twice the events the tracker's limits let
	// in. qmu is taken before mu when both are held.
	qmu        sync.Mutex
	committing bool
	queue      []queuedCall
}

// newTransactor wires a transactor; its ctx (for poison writes) is set
// before Run starts.
func newTransactor(cfg transactorConfig, s txnSink, tracker eventSettler, refused *refusals, iso *isolator) *transactor {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &transactor{cfg: cfg, sink: s, tracker: tracker, refused: refused, iso: iso, ctx: context.Background(),
		lsn: cfg.Resume.LSN, anchor: cfg.Resume.AnchorCommitLSN, anchorTime: cfg.Resume.AnchorCommitTime, fail: make(chan struct{}, 1),
		kick: make(chan struct{}, 1)}
}

// txnAck is one produced event's outcome receiver.
type txnAck struct {
	t      *transactor
	ev     *outbox.Event
	ticket checkpoint.Ticket
	start  time.Time
}

// txnFailure is a produced event's failed outcome, and where it failed
// (partition -1: the sink refused the record itself before it reached a
// partition).
type txnFailure struct {
	ev  *outbox.Event
	tp  topicPartition
	err error
}

// Acked records the outcome; the ticket is Done at the commit.
func (a txnAck) Acked(r sink.Result, err error) {
	t := a.t
	t.amu.Lock()
	if err == nil {
		t.acked = append(t.acked, a)
	} else {
		t.failed = append(t.failed, txnFailure{ev: a.ev, tp: topicPartition{r.Topic, r.Partition}, err: err})
	}
	t.amu.Unlock()
	if err != nil && t.cfg.OnDataLoss != nil && (errors.Is(err, kerr.OutOfOrderSequenceNumber) || errors.Is(err, kerr.UnknownProducerID)) {
		topic := r.Topic
		if topic == "" {
			topic = a.ev.Topic
		}
		t.cfg.OnDataLoss(topic, r.Partition)
	}
	if err != nil {
		select {
		case t.fail <- struct{}{}:
		default:
		}
	}
}

// Emit puts ev into the open Kafka transaction (beginning one), in a
// batch of its own when it failed inside an earlier transaction, or
// quarantines it when Kafka refused it alone poison.max_attempts times.
func (t *transactor) Emit(ev *outbox.Event, tk checkpoint.Ticket) {
	if t.queued(queuedCall{ev: ev, tk: tk}) {
		return
	}
	defer t.mu.Unlock()
	t.emitLocked(ev, tk)
}

// queuedCall is a call of the stream that came while Run committed:
// Emit(ev, tk), skipped(ev) (skip), stop(err), or Commit(end) (none of
// those).
type queuedCall struct {
	ev   *outbox.Event
	tk   checkpoint.Ticket
	skip bool
	err  error
	end  pglogrepl.LSN
}

// isCommit says whether c is a Commit(end).
func (c queuedCall) isCommit() bool { return c.ev == nil && c.err == nil }

// queued queues c when Run is committing (true), so the stream never
// waits for a flush and an EndTxn; otherwise it returns with mu held. A
// Commit right after a queued Commit replaces it: applying both does
// what applying the second does (PostgreSQL 14 sends a Begin and a
// Commit for every transaction of the database, most without events).
func (t *transactor) queued(c queuedCall) bool {
	t.qmu.Lock()
	if t.committing {
		if n := len(t.queue); c.isCommit() && n > 0 && t.queue[n-1].isCommit() {
			t.queue[n-1] = c
		} else {
			t.queue = append(t.queue, c)
		}
		t.qmu.Unlock()
		return true
	}
	t.mu.Lock()
	t.qmu.Unlock()
	return false
}

// applyLocked applies a queued call.
func (t *transactor) applyLocked(c queuedCall) {
	switch {
	case c.err != nil:
		t.failLocked(c.err)
	case c.skip:
		t.skippedLocked(c.ev)
	case c.ev != nil:
		t.emitLocked(c.ev, c.tk)
	default:
		t.commitMarkLocked(c.end)
	}
}

func (t *transactor) emitLocked(ev *outbox.Event, tk checkpoint.Ticket) {
	if t.err != nil {
		return // the session ends; the event is not confirmed, the next session reads it again
	}
	t.seen, t.seenTime = ev.CommitLSN, ev.CommitTime
	t.live = !ev.SentAt.IsZero() && !ev.CommitTime.IsZero() && ev.SentAt.Sub(ev.CommitTime) < t.cfg.Interval
	if ev.CommitLSN != t.cur {
		t.cur, t.ord, t.curTime = ev.CommitLSN, 0, ev.CommitTime
		if ev.CommitLSN == t.cfg.Resume.PartialCommitLSN {
			t.ord = t.cfg.Resume.Ordinal
		}
	}
	key := eventKey{ev.ID, ev.CommitLSN}
	r := t.refused.get(key)
	if r.n >= t.cfg.MaxAttempts {
		t.quarantineLocked(ev, tk, key, r)
		return
	}
	if !t.open {
		if err := t.sink.BeginTxn(); err != nil {
			t.failLocked(err)
			return
		}
		t.open, t.began = true, time.Now()
	}
	if r.alone {
		t.produceAloneLocked(ev, tk, key)
	} else {
		t.produceLocked(ev, tk)
	}
	if t.n >= t.cfg.Records || (t.cfg.Bytes > 0 && t.bytes >= t.cfg.Bytes) || time.Since(t.began) >= t.cfg.Interval {
		t.requestCommitLocked(false)
	}
}

// requestCommitLocked asks Run to commit the open transaction. A full or
// old transaction (live false) also pauses the stream until it has: a
// flush and an EndTxn can take as long as kafka.flush_timeout (a slow or
// failing broker), longer than the server's wal_sender_timeout, and the
// stream must go on answering the server meanwhile, which it does while
// paused, not while it waits in Emit or Commit. A live commit leaves the
// stream reading: its calls queue (bounded by the tracker's limits, which
// pause it when reached) and make the next transaction.
func (t *transactor) requestCommitLocked(live bool) {
	if !live {
		t.pauseLocked()
		t.soon = false
	}
	if t.due {
		return
	}
	t.due, t.soon = true, live
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// pauseLocked holds the stream's reading until resumeLocked.
func (t *transactor) pauseLocked() {
	if !t.paused {
		t.paused = true
		t.tracker.SetPaused(true)
	}
}

// resumeLocked ends the transactor's pause.
func (t *transactor) resumeLocked() {
	if t.paused {
		t.paused = false
		t.tracker.SetPaused(false)
	}
}

// produceLocked hands ev to the open transaction.
func (t *transactor) produceLocked(ev *outbox.Event, tk checkpoint.Ticket) {
	start := ev.ReceivedAt
	if start.IsZero() {
		start = time.Now()
	}
	t.sink.Produce(ev, txnAck{t: t, ev: ev, ticket: tk, start: start})
	t.ord++
	t.n++
	t.bytes += int64(len(ev.Payload))
}

// produceAloneLocked produces ev, which failed inside an earlier
// transaction, in a batch of its own: the records before it are flushed
// first, and it is flushed before anything after it is produced. So a
// failure is its own and counts an attempt (refusal), and an ack clears
// it: the broker took it alone, it was not the record it refused.
func (t *transactor) produceAloneLocked(ev *outbox.Event, tk checkpoint.Ticket, key eventKey) {
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.Timeout)
	defer cancel()
	if !t.flushLocked(ctx) {
		return
	}
	t.produceLocked(ev, tk)
	if t.flushLocked(ctx) {
		t.refused.forget(key)
		t.cfg.Logger.Debug("kafka took alone a record that failed inside an earlier transaction",
			"idempotency_key", ev.IdempotencyKey, "lsn", ev.CommitLSN.String())
	}
}

// quarantineLocked writes the poison row of ev, which Kafka refused alone
// poison.max_attempts times. INV-12: the row is committed before any
// checkpoint past ev can be.
//
// The row's write retries a transient failure for as long as it lasts
// (isolator.quarantine), so the open transaction is committed first and
// mu is released meanwhile: no Kafka transaction outlives
// delivery.transaction_timeout behind the retries, and the ticker and the
// session's end are not stuck behind them. Nothing can step past ev
// meanwhile: no transaction is open, only Emit begins one and only Emit
// and Commit move the position, on this goroutine (the stream's, or Run's
// applying the stream's queued calls while the stream waits on qmu), and
// ev counts in the ordinal only once its row committed.
func (t *transactor) quarantineLocked(ev *outbox.Event, tk checkpoint.Ticket, key eventKey, r refusal) {
	t.commitLocked()
	if t.err != nil {
		return
	}
	topic := ev.Topic
	if topic == "" {
		topic = t.cfg.DefaultTopic
	}
	err := func() error {
		t.mu.Unlock()
		defer t.mu.Lock()
		return t.iso.quarantine(t.ctx, item{ev: ev, ticket: tk}, topic, r.n, r.err, r.class)
	}()
	if err != nil {
		t.failLocked(err)
		return
	}
	t.quarantined = append(t.quarantined, key)
	t.ord++
}

// skipped notes an event the skipper did not hand on: its transaction is
// the checkpoint's anchor once it ended.
func (t *transactor) skipped(ev *outbox.Event) {
	if t.queued(queuedCall{ev: ev, skip: true}) {
		return
	}
	defer t.mu.Unlock()
	t.skippedLocked(ev)
}

func (t *transactor) skippedLocked(ev *outbox.Event) {
	t.seen, t.seenTime = ev.CommitLSN, ev.CommitTime
}

// stop ends the session with err (the skipper found the checkpoint does
// not match the server's WAL), after the stream's calls before it.
func (t *transactor) stop(err error) {
	if err == nil {
		err = errors.New("exactly-once: the session was stopped") // a nil error would queue as a Commit
	}
	if t.queued(queuedCall{err: err}) {
		return
	}
	defer t.mu.Unlock()
	t.failLocked(err)
}

// Commit notes the end of a PostgreSQL transaction: its events are all
// emitted, so a checkpoint may name its end.
func (t *transactor) Commit(end pglogrepl.LSN) {
	if t.queued(queuedCall{end: end}) {
		return
	}
	defer t.mu.Unlock()
	t.commitMarkLocked(end)
}

func (t *transactor) commitMarkLocked(end pglogrepl.LSN) {
	t.lsn, t.cur, t.ord = end, 0, 0
	if t.seen != 0 {
		t.anchor, t.anchorTime, t.seen = t.seen, t.seenTime, 0
	}
	if t.err != nil || !t.open {
		return
	}
	// A live stream commits at each transaction end: a read_committed
	// consumer sees the events about one Kafka commit after the broker
	// has them. A stream draining a backlog commits by
	// delivery.transaction_interval and the size bounds, in large
	// transactions.
	if old := time.Since(t.began) >= t.cfg.Interval; old || t.live {
		t.requestCommitLocked(!old)
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
			t.resumeLocked()
			return t.err
		case <-t.fail:
		case <-t.kick:
		case <-tick.C:
		}
		t.mu.Lock()
		need := false
		if t.err == nil {
			t.amu.Lock()
			failed := len(t.failed) > 0
			t.amu.Unlock()
			need = failed || t.due || (t.open && time.Since(t.began) >= t.cfg.Interval)
		}
		t.mu.Unlock()
		if need {
			t.commitPaused(ctx)
		}
		t.mu.Lock()
		err := t.err
		if err != nil {
			// A failure outside a commit (a record produced alone) may have
			// asked for one: the stream must not stay paused.
			t.due, t.soon = false, false
			t.resumeLocked()
		}
		t.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// commitPaused commits the open transaction with the stream's calls
// queued meanwhile, and with the stream paused (it goes on sending status
// updates) unless the commit is a live one; then it applies the queued
// calls in order. When one of them fills the next transaction, or makes
// it old, that commit runs at once, the rest still queued (a transaction
// never grows past its bounds); when a live transaction end asked for it,
// it runs once all queued calls are applied (what arrived during a commit
// makes one transaction, however many PostgreSQL transactions it holds).
// Otherwise the stream reads on, unpaused.
func (t *transactor) commitPaused(ctx context.Context) {
	t.qmu.Lock()
	t.committing = true
	t.qmu.Unlock()
	t.mu.Lock()
	if !t.due || !t.soon {
		t.pauseLocked()
	}
	for {
		if t.err == nil {
			t.commitLocked()
		}
		t.due, t.soon = false, false
		t.mu.Unlock()

		t.qmu.Lock()
		t.mu.Lock()
		n := 0
		for n < len(t.queue) && (!t.due || t.soon) { // a live end asks, a bound stops here
			n++
			t.applyLocked(t.queue[n-1])
		}
		rest := copy(t.queue, t.queue[n:])
		clear(t.queue[rest:])
		t.queue = t.queue[:rest]
		// Once Run's ctx ended, a live commit is left to Run's own last
		// commit when nothing is left to apply (a full one commits here:
		// the stream could add to it before Run's last commit).
		if t.due && t.err == nil && (ctx.Err() == nil || len(t.queue) > 0 || !t.soon) {
			t.qmu.Unlock() // the stream queues on while the next commit runs
			continue
		}
		t.due, t.soon = false, false
		for _, c := range t.queue { // only after a failure: emitLocked drops, the rest mark
			t.applyLocked(c)
		}
		t.queue, t.committing = nil, false
		t.resumeLocked()
		t.mu.Unlock()
		t.qmu.Unlock()
		return
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
	// INV-9: the checkpoint names what this transaction's records reach.
	// It is produced before the flush, so that it travels with them (mu
	// is held: nothing moves the position until the commit is done); a
	// record that fails aborts it with them.
	cp := kafka.TxnMark{Slot: t.cfg.Slot, SystemID: t.cfg.Identity.SystemID, Timeline: t.cfg.Identity.Timeline, LSN: t.lsn,
		Anchored: true, AnchorCommitLSN: t.anchor, AnchorCommitTime: t.anchorTime}
	if t.cur != 0 && t.ord > 0 {
		cp.PartialCommitLSN, cp.PartialCommitTime, cp.Ordinal = t.cur, t.curTime, t.ord
	}
	if err := t.sink.StageCheckpoint(ctx, cp); err != nil {
		t.failLocked(fmt.Errorf("produce the checkpoint: %w", err))
		return
	}
	if !t.flushLocked(ctx) {
		return
	}
	t.amu.Lock()
	acked := t.acked
	t.acked = nil
	t.amu.Unlock()
	if err := t.sink.CommitTxn(ctx, cp); err != nil {
		t.failLocked(fmt.Errorf("%w (the outcome may be unknown: the transaction is aborted, and the next session reads the checkpoint again and resumes from what committed)", err))
		return
	}
	t.open, t.n, t.bytes = false, 0, 0
	for _, k := range t.quarantined {
		t.refused.forget(k) // the checkpoint is past it
	}
	t.quarantined = nil
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

// flushLocked waits until every record produced into the open
// transaction has its outcome; a failure ends the session (refusal).
func (t *transactor) flushLocked(ctx context.Context) bool {
	if err := t.sink.Flush(ctx); err != nil {
		t.failLocked(fmt.Errorf("flush the kafka transaction: %w", err))
		return false
	}
	t.amu.Lock()
	failed := t.failed
	t.failed = nil
	t.amu.Unlock()
	if len(failed) > 0 {
		err := t.refusal(failed)
		// The staged checkpoint refused for an ACL as well: before
		// transaction.version 2 a partition the broker refuses to add
		// fails every record buffered with it, the checkpoint's included,
		// so the refused topic may be either; both fixes are named (an
		// ACL failure counts no attempt).
		if cpErr := t.sink.StagedRefusal(); cpErr != nil {
			err = fmt.Errorf("%w; the transaction's records failed with it, and the topic Kafka refused may be either (before transaction.version 2 a refused partition fails every record buffered with it): %w", cpErr, err)
		}
		t.failLocked(err)
		return false
	}
	return true
}

// refusedBatch is what failed with a record-level error in one partition.
type refusedBatch struct {
	n     int
	first *outbox.Event
}

// refusal turns the failed records of a flushed transaction into the
// session's error (the first failure's), after noting the record-level
// failures in refused (noteRefusals).
func (t *transactor) refusal(failed []txnFailure) error {
	for _, f := range failed {
		if kafka.Fenced(f.err) {
			return fmt.Errorf("event %q: %w: %w", f.ev.IdempotencyKey, kafka.ErrFenced, f.err)
		}
	}
	batches := t.noteRefusals(failed)
	f := failed[0]
	ev, err := f.ev, f.err
	topic := ev.Topic
	if topic == "" {
		topic = t.cfg.DefaultTopic
	}
	kind, class := sink.KindOf(err)
	switch kind {
	case sink.Record:
		if b := batches[f.tp]; b != nil && b.n > 1 {
			return fmt.Errorf("kafka refused a batch of topic %q partition %d inside a transaction (%s), failing %d records with it from event %q on; the transaction is aborted, and the next session produces each of them alone to find the record refused: %w",
				topic, f.tp.partition, class, b.n, ev.IdempotencyKey, err)
		}
		return fmt.Errorf("kafka refused event %q on topic %q (%s, attempt %d of %d); the transaction is aborted: %w",
			ev.IdempotencyKey, topic, class, t.refused.get(eventKey{ev.ID, ev.CommitLSN}).n, t.cfg.MaxAttempts, err)
	case sink.Destination:
		return &destinationError{Key: ev.IdempotencyKey, Topic: topic, Class: class, Err: err}
	}
	return fmt.Errorf("kafka failed event %q on topic %q (%s, %s); the transaction is aborted and the session restarts from the checkpoint: %w",
		ev.IdempotencyKey, topic, kind, class, err)
}

// noteRefusals notes the record-level failures of a flushed transaction in
// refused and returns them by partition. A failure counts an attempt for
// the event (quarantined once it reached poison.max_attempts) only when
// it is the record's own: the sink refused the record itself (partition
// -1: the size pre-check, a record it cannot build), or it is the only
// record of its partition that failed. A broker refuses a whole batch
// and franz-go fails every buffered record of the partition with its
// error (recBuf.failAllRecords), so when several failed together none is
// counted: each is a suspect, produced alone by the next session
// (produceAloneLocked) until the one Kafka refuses alone is found.
func (t *transactor) noteRefusals(failed []txnFailure) map[topicPartition]*refusedBatch {
	batches := map[topicPartition]*refusedBatch{}
	for _, f := range failed {
		if kind, _ := sink.KindOf(f.err); kind == sink.Record && f.tp.partition >= 0 {
			b := batches[f.tp]
			if b == nil {
				b = &refusedBatch{first: f.ev}
				batches[f.tp] = b
			}
			b.n++
		}
	}
	for _, f := range failed {
		kind, class := sink.KindOf(f.err)
		if kind != sink.Record {
			continue
		}
		key := eventKey{f.ev.ID, f.ev.CommitLSN}
		if b := batches[f.tp]; b != nil && b.n > 1 {
			t.refused.suspect(key, f.err, class)
			continue
		}
		n := t.refused.add(key, f.err, class)
		t.cfg.Logger.Warn("kafka refused a record inside a transaction; the transaction is aborted and the session restarts from the checkpoint",
			"idempotency_key", f.ev.IdempotencyKey, "topic", f.tp.topic, "error_class", class, "attempt", n, "max_attempts", t.cfg.MaxAttempts, "err", f.err.Error())
	}
	for tp, b := range batches {
		if b.n > 1 {
			t.cfg.Logger.Warn("kafka refused a batch inside a transaction and franz-go failed the partition's records with it; the transaction is aborted, and the next session produces each of them alone to find the record refused",
				"topic", tp.topic, "partition", tp.partition, "records", b.n, "first_idempotency_key", b.first.IdempotencyKey)
		}
	}
	return batches
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
		if aerr := t.sink.AbortTxn(ctx); kafka.Fenced(aerr) {
			// A produce of a fenced producer fails with
			// INVALID_PRODUCER_EPOCH, which is not fencing alone; the
			// abort's PRODUCER_FENCED is.
			t.err = fmt.Errorf("%w (the session failed with: %s)", aerr, err.Error())
		} else if aerr != nil {
			t.cfg.Logger.Warn("cannot abort the kafka transaction; the next session's producer aborts it when it initialises", "slot", t.cfg.Slot, "err", aerr.Error())
		}
		cancel()
	}
	if t.open && t.cfg.OnCommit != nil {
		t.cfg.OnCommit("aborted", t.n)
	}
	t.open = false
	t.amu.Lock()
	t.acked, t.failed = nil, nil
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
