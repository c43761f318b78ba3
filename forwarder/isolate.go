package forwarder

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/poison"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// errBreaker: too many events were quarantined within the window; a
// systematic failure must not drain the outbox into quarantine. Fatal.
var errBreaker = errors.New("poison breaker tripped")

// destinationError: Kafka refuses the destination (authorization, unknown
// topic). Forwarding stops until it is fixed; nothing is poisoned.
type destinationError struct {
	Key, Topic, Class string
	Err               error
}

func (e *destinationError) Error() string {
	who := fmt.Sprintf("kafka refuses topic %q", e.Topic)
	if e.Class == kafka.ClassSchemaSubject {
		who = fmt.Sprintf("the schema registry has no usable schema for topic %q", e.Topic)
	}
	return fmt.Sprintf("%s (%s) for event %q; nothing is quarantined and the slot does not move past it: %v",
		who, e.Class, e.Key, e.Err)
}

func (e *destinationError) Unwrap() error { return e.Err }

// Quarantine stores an event that keeps failing; Put returns once it is
// durable (poison.Store).
type quarantineStore interface {
	Put(ctx context.Context, e poison.Entry) error
}

// Tracker is what the Isolator reports to: each event's Done to the
// frontier (checkpoint.Tracker), and the hold on reading to the stream
// (checkpoint.Pause) while failed records are isolated.
type eventSettler interface {
	Done(checkpoint.Ticket)
	SetPaused(bool)
}

// settler is a session's Tracker: its frontier and its stream's pause.
type settler struct {
	*checkpoint.Tracker
	pause *checkpoint.Pause
}

// SetPaused holds the stream's reading (true) or lets it go on.
func (s settler) SetPaused(on bool) { s.pause.Set(on) }

// isolatorConfig tunes the Isolator.
type isolatorConfig struct {
	MaxAttempts  int           // attempts before quarantine; default 5
	Backoff      time.Duration // pause before re-sending a record that failed alone, doubled each time; default 200ms
	MaxRate      int           // quarantined events within RateWindow that trip the breaker; default 100
	RateWindow   time.Duration // default 1m
	DefaultTopic string        // topic of rows without one, for the poison row
	Logger       *slog.Logger
	// Routed: the record's topic is a template applied to the row's
	// topic column (mapping.topic_template other than ${routedByValue},
	// always in the debezium profile), so the poison row keeps the
	// column's value, and for a NULL column "" rather than DefaultTopic:
	// a replay applies the template to what the poison row holds, and
	// routes "" to kafka.topic as the stream did.
	Routed bool
	// OnPoisoned is called after an event is quarantined (metrics).
	OnPoisoned func(topic, class string)
	// OnAck is called for each acknowledged event with its row's topic
	// ("" for the default), its commit time, the time from its receipt
	// (Event.ReceivedAt; for an event held while a failed record was
	// settled, its release) to the acknowledgement, and the time of the
	// acknowledgement (metrics). It must not block.
	OnAck func(topic string, commit time.Time, produceLatency time.Duration, now time.Time)
	// OnOrderViolation is called when a record was appended ahead of an
	// earlier record of its partition that the broker refused (metrics).
	OnOrderViolation func(topic string, partition int32)
	// Recent are the ages of the quarantines already within RateWindow
	// when the Isolator starts (poison.Store.Recent, by the database's
	// clock): the breaker counts them, so a restart loop cannot quarantine
	// MaxRate more events each time.
	Recent []time.Duration
}

// Isolator routes events to the sink and settles failed ones.
type isolator struct {
	cfg     isolatorConfig
	prod    sink.Sink
	store   quarantineStore
	tracker eventSettler

	gate   sync.Mutex // held while producing, so held events keep their order
	paused atomic.Bool
	held   []item
	seq    uint64

	fmu       sync.Mutex
	failed    []item
	unsettled map[topicPartition]uint64 // lowest emit seq of a refused record not yet settled
	anyUnset  atomic.Bool               // unsettled is not empty (lets acks skip the lock)
	kick      chan struct{}

	poisoned []time.Time // quarantine times within the window

	// backoffWait waits before re-sending a record that failed alone
	// (sleep; tests count the waits).
	backoffWait func(ctx context.Context, d time.Duration) bool
}

type topicPartition struct {
	topic     string
	partition int32
}

type item struct {
	ev     *outbox.Event
	ticket checkpoint.Ticket
	seq    uint64
	err    error
}

// newIsolator wires an Isolator; Run must run for failures to be settled.
func newIsolator(cfg isolatorConfig, prod sink.Sink, store quarantineStore, tracker eventSettler) *isolator {
	if cfg.MaxAttempts < 1 {
		cfg.MaxAttempts = 5
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 200 * time.Millisecond
	}
	if cfg.MaxRate < 1 {
		cfg.MaxRate = 100
	}
	if cfg.RateWindow <= 0 {
		cfg.RateWindow = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	i := &isolator{cfg: cfg, prod: prod, store: store, tracker: tracker, kick: make(chan struct{}, 1), backoffWait: sleep}
	now := time.Now()
	for _, age := range cfg.Recent {
		i.poisoned = append(i.poisoned, now.Add(-age))
	}
	slices.SortFunc(i.poisoned, time.Time.Compare)
	return i
}

// Emit hands an event on: produced at once, or held in order while failed
// records are being settled. Called from the replication goroutine.
func (i *isolator) Emit(ev *outbox.Event, t checkpoint.Ticket) {
	i.gate.Lock()
	defer i.gate.Unlock()
	it := item{ev: ev, ticket: t, seq: i.seq}
	i.seq++
	if i.paused.Load() {
		i.held = append(i.held, it)
		return
	}
	i.produce(it, ev.ReceivedAt)
}

// Commit is the end of a PostgreSQL transaction; in at-least-once delivery
// the isolator has nothing to do with it (the tracker confirms the
// transaction once its events are acknowledged).
func (i *isolator) Commit(pglogrepl.LSN) {}

// pending is a produced event awaiting its outcome, its own callback,
// reused through pendings once an acknowledged event is done with.
type pending struct {
	i  *isolator
	it item
	// What OnAck needs, copied while the event is in the cache: reading
	// the event itself at the ack, milliseconds later, was a cache miss
	// per event.
	start  time.Time
	commit time.Time
	topic  string
}

var pendings = sync.Pool{New: func() any { return new(pending) }}

// produce hands it to the sink; its produce latency counts from start
// (now when zero).
func (i *isolator) produce(it item, start time.Time) {
	p := pendings.Get().(*pending)
	p.i, p.it = i, it
	if i.cfg.OnAck != nil {
		if start.IsZero() {
			start = time.Now()
		}
		p.start, p.commit, p.topic = start, it.ev.CommitTime, it.ev.Topic
	}
	i.prod.Produce(it.ev, p)
}

// Acked handles the outcome of one produced event.
func (p *pending) Acked(r sink.Result, err error) {
	i, it := p.i, p.it
	if err == nil {
		// INV-1: the ack releases the event.
		i.tracker.Done(it.ticket)
		if i.cfg.OnAck != nil {
			now := time.Now()
			i.cfg.OnAck(p.topic, p.commit, now.Sub(p.start), now)
		}
		i.checkOrder(r, it)
		// Nothing refers to p any more: the sink calls Acked once.
		p.i, p.it, p.topic = nil, item{}, ""
		pendings.Put(p)
		return
	}
	// Promises must not block: record the failure and wake Run.
	i.paused.Store(true)
	i.tracker.SetPaused(true)
	it.err = err
	i.fmu.Lock()
	i.failed = append(i.failed, it)
	if r.Partition >= 0 {
		tp := topicPartition{r.Topic, r.Partition}
		if s, ok := i.unsettled[tp]; !ok || it.seq < s {
			if i.unsettled == nil {
				i.unsettled = map[topicPartition]uint64{}
			}
			i.unsettled[tp] = it.seq
			i.anyUnset.Store(true)
		}
	}
	i.fmu.Unlock()
	select {
	case i.kick <- struct{}{}:
	default:
	}
}

// Run settles failures until ctx ends or a failure must end the session
// (a *destinationError, errBreaker, or an unknown/transient failure). The
// session's ctx for it outlives a clean stop (isolatorContext).
func (i *isolator) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-i.kick:
		}
		if err := i.settle(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// checkOrder detects the one case walpost cannot prevent: franz-go reports
// a refused batch asynchronously, so a record of the same partition emitted
// in the moment before the report is appended ahead of the refused record's
// re-sent neighbours. It is logged with its key and counted.
func (i *isolator) checkOrder(r sink.Result, it item) {
	if !i.anyUnset.Load() {
		return
	}
	i.fmu.Lock()
	s, ok := i.unsettled[topicPartition{r.Topic, r.Partition}]
	i.fmu.Unlock()
	if ok && s < it.seq {
		i.cfg.Logger.Error("record appended ahead of an earlier refused record of its partition (per-partition order broken once; consumers see it before the re-sent neighbours)",
			"idempotency_key", it.ev.IdempotencyKey, "topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
		if i.cfg.OnOrderViolation != nil {
			i.cfg.OnOrderViolation(r.Topic, r.Partition)
		}
	}
}

func (i *isolator) settle(ctx context.Context) error {
	i.tracker.SetPaused(true)
	// Every produced record gets its outcome first: franz-go fails all
	// buffered records of a partition along with the guilty one.
	if err := i.prod.Flush(ctx); err != nil {
		return err
	}
	i.fmu.Lock()
	failed := i.failed
	i.failed = nil
	i.fmu.Unlock()
	defer func() {
		i.fmu.Lock()
		if len(i.failed) == 0 {
			clear(i.unsettled)
			i.anyUnset.Store(false)
		}
		i.fmu.Unlock()
	}()
	// One at a time, in the order they were emitted.
	slices.SortFunc(failed, func(a, b item) int { return cmp.Compare(a.seq, b.seq) })
	for _, it := range failed {
		if err := i.settleOne(ctx, it); err != nil {
			return err
		}
	}
	// Release held events in order, then let new ones through.
	i.gate.Lock()
	i.paused.Store(false)
	held := i.held
	i.held = nil
	for _, h := range held {
		i.produce(h, time.Time{})
	}
	i.gate.Unlock()
	i.tracker.SetPaused(false)
	return nil
}

func (i *isolator) settleOne(ctx context.Context, it item) error {
	err := it.err
	attempts := 1
	topic := it.ev.Topic
	if topic == "" {
		topic = i.cfg.DefaultTopic
	}
	for {
		kind, class := sink.KindOf(err)
		switch kind {
		case sink.Record:
			if attempts >= i.cfg.MaxAttempts {
				return i.quarantine(ctx, it, topic, attempts, err, class)
			}
			i.cfg.Logger.Warn("kafka refused a record; retrying it alone",
				"idempotency_key", it.ev.IdempotencyKey, "topic", topic, "error_class", class, "attempt", attempts, "err", err.Error())
			// The first re-send goes at once: franz-go fails every
			// buffered record of a partition with the one the broker
			// refused, and those neighbours are fine alone. Only a
			// record that failed alone waits, poison.backoff doubling
			// up to its cap.
			if attempts > 1 && !i.backoffWait(ctx, attemptPause(i.cfg.Backoff, attempts-1)) {
				return ctx.Err()
			}
		case sink.Destination:
			return &destinationError{Key: it.ev.IdempotencyKey, Topic: topic, Class: class, Err: err}
		default:
			return fmt.Errorf("kafka failed event %q on topic %q (%s, %s); the session restarts from the slot: %w",
				it.ev.IdempotencyKey, topic, kind, class, err)
		}
		attempts++
		err = sink.ProduceSync(ctx, i.prod, it.ev)
		if err == nil {
			i.tracker.Done(it.ticket)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// attemptPause is the pause after the n-th failed attempt (n ≥ 1): first,
// doubled each time, never above config.PoisonBackoffCap (a plain shift
// overflows past 2^63 ns and would not pause at all).
func attemptPause(first time.Duration, n int) time.Duration {
	d := first
	for ; n > 1 && d < config.PoisonBackoffCap; n-- {
		d *= 2
	}
	return min(d, config.PoisonBackoffCap)
}

// quarantine writes the poison row, retrying a transient failure until it
// commits: the slot never moves past the event meanwhile (INV-1), and the
// event is never dropped (INV-2). A failure retrying cannot cure
// (poison.ErrUnwritable) ends the session instead, with the event neither
// confirmed nor quarantined. Once more than MaxRate events were
// quarantined within RateWindow (counting those of earlier sessions) the
// breaker trips, before writing another row.
func (i *isolator) quarantine(ctx context.Context, it item, topic string, attempts int, cause error, class string) error {
	if err := i.breaker(time.Now(), class, topic); err != nil {
		return err
	}
	e := poison.Entry{Event: it.ev, Topic: topic, Attempts: attempts, LastError: cause.Error(), ErrorClass: class}
	if i.cfg.Routed && it.ev.Topic == "" {
		e.Topic = ""
	}
	backoff := i.cfg.Backoff
	for {
		err := i.store.Put(ctx, e)
		if err == nil {
			break
		}
		if errors.Is(err, poison.ErrUnwritable) {
			i.cfg.Logger.Error("cannot write the poison row, and retrying cannot help; walpost stops with the slot before this event",
				"idempotency_key", it.ev.IdempotencyKey, "topic", topic, "lsn", it.ev.CommitLSN.String(), "err", err.Error())
			return fmt.Errorf("quarantine event %q (commit %s): %w", it.ev.IdempotencyKey, it.ev.CommitLSN, err)
		}
		i.cfg.Logger.Error("cannot write the poison row; the slot stays before this event and walpost retries",
			"idempotency_key", it.ev.IdempotencyKey, "topic", topic, "err", err.Error(), "retry_in", backoff.String())
		if !sleep(ctx, backoff) {
			return ctx.Err()
		}
		backoff = min(backoff*2, 30*time.Second)
	}
	i.tracker.Done(it.ticket)
	i.cfg.Logger.Warn("event quarantined in the poison table",
		"idempotency_key", it.ev.IdempotencyKey, "topic", topic, "error_class", class, "attempts", attempts,
		"lsn", it.ev.CommitLSN.String(), "err", cause.Error())
	if i.cfg.OnPoisoned != nil {
		i.cfg.OnPoisoned(topic, class)
	}
	now := time.Now()
	i.poisoned = append(i.poisoned, now)
	return i.breaker(now, class, topic)
}

// breaker forgets quarantines older than RateWindow and returns errBreaker
// when more than MaxRate remain.
func (i *isolator) breaker(now time.Time, class, topic string) error {
	cut := 0
	for cut < len(i.poisoned) && now.Sub(i.poisoned[cut]) > i.cfg.RateWindow {
		cut++
	}
	i.poisoned = i.poisoned[cut:]
	if len(i.poisoned) > i.cfg.MaxRate {
		return fmt.Errorf("%w: %d events quarantined within %s (poison.max_rate %d): a systematic failure (%s on topic %q) must not drain the outbox; fix the cause, then restart walpost (raise poison.max_rate if this volume is expected)",
			errBreaker, len(i.poisoned), i.cfg.RateWindow, i.cfg.MaxRate, class, topic)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
