package kafka

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/sink"
)

// A topic's records wait in the sink while its max.message.bytes cannot
// be read because Kafka does not answer (the first record of a topic the
// sink has not produced to yet, or a recheck of a record above the limit
// last read): the caller goes on (the replication stream keeps reading up
// to its in-flight limit and sending status updates), the limit is read
// again every limitRetry, and once it is known the held records are
// checked and produced in the order they came, before any later record of
// the topic. A record is never checked against a guessed limit, so none
// is quarantined for a size the topic allows. Records of other topics are
// not held.
//
// In exactly-once mode records are not held: a transaction's records must
// reach the client before it commits, so an unreadable limit is a
// transient failure of the session, as a Kafka outage is anyway.

// hold is the queue of one topic's held records.
type hold struct {
	recs []*produced
	// taken counts the records await took out of recs to try the limit
	// again: still held (Held, walpost_kafka_held_records) until each is
	// sent, failed or put back.
	taken int
	done  chan struct{} // closed once the queue is empty and removed
}

// holdable reports whether a record whose size check failed with err
// waits in the sink for its topic's limit.
func (k *Sink) holdable(err error) bool {
	return k.cfg.TransactionalID == "" && errors.Is(err, ErrLimitUnknown) && !refusesDescribe(err)
}

// heldBehind appends p to its topic's queue when the topic has one, so p
// is sent after the records held before it; false when the topic has no
// queue.
func (k *Sink) heldBehind(p *produced) bool {
	k.holdMu.Lock()
	defer k.holdMu.Unlock()
	h := k.holds[p.rec.Topic]
	if h == nil {
		return false
	}
	h.recs = append(h.recs, p)
	return true
}

// startHold queues p, the first record of its topic to wait for the
// topic's limit (or the next one, if a queue was started meanwhile).
func (k *Sink) startHold(p *produced, why error) {
	topic := p.rec.Topic
	k.holdMu.Lock()
	defer k.holdMu.Unlock()
	select {
	case <-k.quit: // closed: no goroutine may start
		go k.fail(p, kgo.ErrClientClosed)
		return
	default:
	}
	if h := k.holds[topic]; h != nil {
		h.recs = append(h.recs, p)
		return
	}
	if k.holds == nil {
		k.holds = map[string]*hold{}
	}
	h := &hold{recs: []*produced{p}, done: make(chan struct{})}
	k.holds[topic] = h
	k.nholds.Add(1)
	k.log.Warn("holding the topic's records until its max.message.bytes can be read; they are sent in order once it is",
		"topic", topic, "first_idempotency_key", string(p.rec.Key), "err", why.Error(), "retry_in", k.limitRetry.String())
	k.holders.Add(1)
	go k.await(topic, h)
}

// await reads topic's limit every limitRetry until it is known, then
// sends the held records in order; on Close it fails them as transient
// (kgo.ErrClientClosed), so each still gets exactly one outcome.
func (k *Sink) await(topic string, h *hold) {
	defer k.holders.Done()
	timer := time.NewTimer(k.limitRetry)
	defer timer.Stop()
	started, sent := time.Now(), 0
	for {
		select {
		case <-k.quit:
			k.holdMu.Lock()
			recs := h.recs
			h.recs = nil
			k.unhold(topic, h)
			k.holdMu.Unlock()
			for _, p := range recs {
				k.fail(p, kgo.ErrClientClosed)
			}
			return
		case <-timer.C:
		}
		// The records are taken out of the queue in batches; records that
		// arrive meanwhile queue behind them, so the topic's order holds.
		for {
			k.holdMu.Lock()
			recs := h.recs
			if len(recs) == 0 {
				k.unhold(topic, h)
				k.holdMu.Unlock()
				k.log.Info("the topic's max.message.bytes was read; its held records were sent",
					"topic", topic, "records", sent, "held_for", time.Since(started).Round(time.Millisecond).String())
				return
			}
			h.recs, h.taken = nil, len(recs)
			k.holdMu.Unlock()
			n, failed := k.release(recs)
			sent += n
			k.holdMu.Lock()
			h.taken = 0
			if !failed && n < len(recs) {
				// The limit could not be read again: the rest goes back
				// to the front of the queue.
				h.recs = append(recs[n:len(recs):len(recs)], h.recs...)
			}
			k.holdMu.Unlock()
			if failed {
				// A held record failed: the records behind it must not
				// overtake it, so they fail too (transient: the session
				// restarts and sends them again from the slot, in order).
				// The queue stays until it is empty, so records that
				// arrive meanwhile fail behind them too, and Flush
				// returns only once each has its outcome.
				k.log.Warn("a held record of the topic failed; the records held behind it fail too and are sent again in order",
					"topic", topic, "idempotency_key", string(recs[n-1].rec.Key))
				rest := recs[n:]
				for {
					for _, p := range rest {
						k.fail(p, ErrHeldBehind)
					}
					k.holdMu.Lock()
					rest, h.recs = h.recs, nil
					if len(rest) == 0 {
						k.unhold(topic, h)
						k.holdMu.Unlock()
						return
					}
					k.holdMu.Unlock()
				}
			}
			if n < len(recs) {
				timer.Reset(k.limitRetry)
				break
			}
		}
	}
}

// release checks and sends recs in order and returns how many it took:
// sent, or the last one failed (failed true); it stops before the first
// record whose topic limit still cannot be read, and after the first
// that fails.
func (k *Sink) release(recs []*produced) (n int, failed bool) {
	for i, p := range recs {
		if err := k.checkSize(&p.rec, time.Now()); err != nil {
			if k.holdable(err) {
				return i, false
			}
			k.fail(p, err)
			return i + 1, true
		}
		k.client.Load().Produce(context.Background(), &p.rec, promise)
	}
	return len(recs), false
}

// ErrHeldBehind: the record waited in the sink behind an earlier record
// of its topic that failed; transient, so the session restarts and sends
// both again from the slot, in order.
var ErrHeldBehind = errors.New("held behind an earlier record of its topic that failed; sent again in order")

// unhold removes h, empty, from the queues; k.holdMu is held.
func (k *Sink) unhold(topic string, h *hold) {
	delete(k.holds, topic)
	k.nholds.Add(-1)
	close(h.done)
}

// fail reports err as p's outcome and releases p.
func (k *Sink) fail(p *produced, err error) {
	a, topic := p.done, p.rec.Topic
	p.release()
	a.Acked(sink.Result{Topic: topic, Partition: -1, Offset: -1}, classified(err, topic))
}

// Held returns how many records wait for their topic's limit.
func (k *Sink) Held() int {
	k.holdMu.Lock()
	defer k.holdMu.Unlock()
	n := 0
	for _, h := range k.holds {
		n += len(h.recs) + h.taken
	}
	return n
}

// waitHeld waits until no record is held, or ctx ends.
func (k *Sink) waitHeld(ctx context.Context) error {
	for k.nholds.Load() > 0 {
		var done chan struct{}
		k.holdMu.Lock()
		for _, h := range k.holds {
			done = h.done
			break
		}
		k.holdMu.Unlock()
		if done == nil {
			return nil
		}
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
