package resend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// TxnSink is what resend needs of a transactional sink (sink/kafka.Sink
// built with a TransactionalID).
type TxnSink interface {
	sink.Sink
	BeginTxn() error
	CommitTxn(ctx context.Context, cp kafka.TxnMark) error
	AbortTxn(ctx context.Context) error
}

// emitter produces rows in order with at most cap(slots) unacknowledged.
// Without txs, each acknowledged row is done in the frontier; with txs
// (exactly-once mode) rows are produced inside Kafka transactions of at
// most per rows, committed also once open for interval, and a row is done
// only when its transaction committed.
type emitter struct {
	sink  sink.Sink
	front *frontier
	slots chan struct{}

	txs      TxnSink
	per      int
	interval time.Duration
	cp       kafka.TxnMark
	open     bool
	n        int // rows in the open transaction
	opened   time.Time
	txns     int // transactions committed
	fenced   bool

	mu     sync.Mutex
	nfail  int
	failed []string // "key: error", the first few
}

// commitBefore commits the open Kafka transaction (exactly-once) when a
// wait of d would keep it open past the transaction interval.
func (e *emitter) commitBefore(ctx context.Context, d time.Duration) error {
	if e.txs == nil || !e.open || d <= 0 || time.Since(e.opened)+d < e.interval {
		return nil
	}
	return e.commit(ctx)
}

// emit produces ev, whose place in the order is cur.
func (e *emitter) emit(ctx context.Context, ev *outbox.Event, cur Cursor, bytes int64) error {
	if err := e.err(); err != nil {
		return err
	}
	if e.txs != nil {
		if e.open && (e.n >= max(e.per, 1) || time.Since(e.opened) >= e.interval) {
			if err := e.commit(ctx); err != nil {
				return err
			}
		}
		if err := e.begin(); err != nil {
			return err
		}
		e.n++
	}
	select {
	case e.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	seq := e.front.add(cur, bytes)
	key := ev.IdempotencyKey
	txn := e.txs != nil
	e.sink.Produce(ev, sink.AckFunc(func(_ sink.Result, err error) {
		switch {
		case err != nil:
			e.mu.Lock()
			e.nfail++
			if len(e.failed) < 5 {
				e.failed = append(e.failed, key+": "+err.Error())
			}
			e.mu.Unlock()
		case !txn:
			// Invariant 3: only an acknowledged row joins the prefix.
			e.front.done(seq)
		}
		<-e.slots
	}))
	return nil
}

// err is the failure of the records produced so far, nil when none
// failed. Invariant 5: a row that fails stops the resend, naming it.
func (e *emitter) err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.nfail == 0 {
		return nil
	}
	return fmt.Errorf("kafka refused %d resent record(s), e.g. %s (a row walpost cannot build, such as a NULL payload or headers that are not an object of strings, must be corrected in the outbox table; a record too large needs a larger max.message.bytes)",
		e.nfail, strings.Join(e.failed, "; "))
}

// wait flushes the sink: every produced record has its outcome.
func (e *emitter) wait(ctx context.Context) error {
	if err := e.sink.Flush(ctx); err != nil {
		return fmt.Errorf("wait for Kafka's acknowledgements: %w", err)
	}
	return e.err()
}

func (e *emitter) begin() error {
	if e.open {
		return nil
	}
	if err := e.txs.BeginTxn(); err != nil {
		e.fenced = kafka.Fenced(err)
		return err
	}
	e.open, e.n, e.opened = true, 0, time.Now()
	return nil
}

// commit waits for every record's outcome and commits the open
// transaction, only when none failed; its rows are then done.
func (e *emitter) commit(ctx context.Context) error {
	if err := e.wait(ctx); err != nil {
		return err
	}
	if err := e.txs.CommitTxn(ctx, e.cp); err != nil {
		e.fenced = kafka.Fenced(err)
		return err
	}
	e.open = false
	e.txns++
	e.front.doneThrough()
	return nil
}

// finish waits for every outcome (and commits the open transaction).
func (e *emitter) finish(ctx context.Context) error {
	if e.txs == nil {
		return e.wait(ctx)
	}
	if !e.open {
		return e.err()
	}
	return e.commit(ctx)
}

// settle, after a failure, lets the records in flight get their outcome
// (so the prefix grows over those acknowledged), or aborts the open
// transaction (a fenced producer must not).
func (e *emitter) settle(ctx context.Context, log *slog.Logger) {
	if e.txs == nil {
		_ = e.sink.Flush(ctx)
		return
	}
	if !e.open || e.fenced {
		return
	}
	if err := e.txs.AbortTxn(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Warn("abort the kafka transaction of the stopped resend (the broker aborts it after delivery.transaction_timeout)", "error", err)
	}
	e.open = false
}
