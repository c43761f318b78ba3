package forwarder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/replication/replicationtest"
	"github.com/walpost/walpost/sink/kafka"
)

// Session rules proven in-process: a whole Forwarder (Run) against the
// fake walsender of replicationtest, with a scripted sink or kfake
// (harness_test.go). Each test names the invariant it guards.

// TestSessionConfirmsNeverPastUnackedEvent (INV-1): the position confirmed
// to the walsender never passes an event the sink has not acknowledged,
// even when a later event is acknowledged first and a keepalive reports
// the WAL's end; it moves to the end of both once the first is
// acknowledged too.
func TestSessionConfirmsNeverPastUnackedEvent(t *testing.T) {
	t.Parallel()
	h := newSessionHarness(t, replicationtest.Config{}, nil)
	s := newHeldSink()
	h.run(Deps{Sink: s})
	start := h.pg.Slot().Confirmed
	first := h.pg.Append(row(1))
	second := h.pg.Append(row(2))
	s.waitProduced(h.ctx, t, 2)

	s.ack(t, "k2")
	// The acknowledgement reached the tracker: one event left in flight.
	if err := h.pg.Wait(h.ctx, "the tracker to see the second event acknowledged", func() bool {
		b := h.f.m.budget.Load()
		n, _ := b.InFlight()
		return n == 1
	}); err != nil {
		t.Fatal(err)
	}
	// A keepalive at the WAL's end asks for a status update, after the
	// acknowledgement.
	n := len(h.pg.Statuses())
	h.pg.Keepalive(true)
	if err := h.pg.Wait(h.ctx, "a status update answering the keepalive", func() bool { return len(h.pg.Statuses()) > n }); err != nil {
		t.Fatal(err)
	}
	for _, st := range h.pg.Statuses() {
		if st.Flush > start {
			t.Fatalf("confirmed %s with the first event (transaction ending %s) unacknowledged: want nothing past the slot's %s (the second event, acknowledged, ends %s)",
				st.Flush, first.End, start, second.End)
		}
	}

	s.ack(t, "k1")
	h.waitFlush(second.End)
}

// TestSessionStopWithinDeadline (kafka.flush_timeout): a stop with events
// the sink never acknowledges ends Run within the flush timeout (plus the
// final status update and position write it allows), confirming nothing
// past them to the walsender or in walpost_position.
func TestSessionStopWithinDeadline(t *testing.T) {
	t.Parallel()
	const flushTimeout = 500 * time.Millisecond
	h := newSessionHarness(t, replicationtest.Config{}, func(cfg *config.Config) { cfg.Kafka.FlushTimeout = flushTimeout })
	s := newHeldSink()
	h.run(Deps{Sink: s})
	start := h.pg.Slot().Confirmed
	acked := h.pg.Append(row(1))
	s.waitProduced(h.ctx, t, 1)
	s.ack(t, "k1")
	h.waitFlush(acked.End)
	h.pg.Append(row(2))
	s.waitProduced(h.ctx, t, 2)

	stopped := time.Now()
	h.stop()
	if err := h.result(); err != nil {
		t.Fatalf("Run after a stop: %v, want nil", err)
	}
	// The drain and the final flush end by the flush timeout; the final
	// status update and position write are quick on a live server.
	if took := time.Since(stopped); took > flushTimeout+2*time.Second {
		t.Fatalf("Run returned %s after the stop, want within the flush timeout %s (+2s)", took.Round(time.Millisecond), flushTimeout)
	}
	if got := h.pg.MaxFlush(); got != acked.End {
		t.Errorf("confirmed %s to the walsender, want %s: the end of the acknowledged transaction, not past the unacknowledged one (slot started at %s)", got, acked.End, start)
	}
	if p := h.db.position(); p == nil || p.LSN != acked.End {
		t.Errorf("walpost_position %+v, want LSN %s", p, acked.End)
	}
}

// TestSessionChecksPositionBeforeStart (INV-7, DESIGN.md "Position"): the
// session compares walpost_position with the slot before
// START_REPLICATION. A slot missing under a recorded position ends walpost
// with position.ErrGap, and nothing creates a slot over the gap or starts
// replication; a slot behind the recorded position (PostgreSQL lost a
// confirmed position) streams, and the transactions up to the position
// are skipped, not produced again.
func TestSessionChecksPositionBeforeStart(t *testing.T) {
	t.Parallel()
	t.Run("slot missing", func(t *testing.T) {
		t.Parallel()
		h := newSessionHarness(t, replicationtest.Config{NoSlot: true}, nil)
		h.db.setPosition(position.Row{Slot: h.cfg.Postgres.Slot, Identity: position.Identity{SystemID: 7, Timeline: 1}, LSN: 0x2000000})
		h.run(Deps{Sink: newHeldSink()})
		err := h.waitExit(10 * time.Second)
		if !errors.Is(err, position.ErrGap) {
			t.Errorf("Run: %v, want position.ErrGap", err)
		}
		if n, sl := h.pg.Starts(), h.pg.Slot(); n > 0 || sl.Exists {
			t.Errorf("%d START_REPLICATION, slot %+v: want no slot created and no replication over the gap", n, sl)
		}
	})
	t.Run("slot behind", func(t *testing.T) {
		t.Parallel()
		h := newSessionHarness(t, replicationtest.Config{}, nil)
		h.pg.Append(row(1))
		upTo := h.pg.Append(row(2))
		after := h.pg.Append(row(3))
		h.db.setPosition(position.Row{Slot: h.cfg.Postgres.Slot, Identity: position.Identity{SystemID: 7, Timeline: 1}, LSN: upTo.End})
		s := newHeldSink()
		h.run(Deps{Sink: s})
		s.waitProduced(h.ctx, t, 1)
		s.ack(t, "k3")
		h.waitFlush(after.End)
		s.mu.Lock()
		defer s.mu.Unlock()
		var keys []string
		for _, e := range s.events {
			keys = append(keys, e.ev.IdempotencyKey)
		}
		if len(keys) != 1 || keys[0] != "k3" {
			t.Errorf("produced %v, want [k3]: the transactions up to walpost_position's %s are skipped", keys, upTo.End)
		}
	})
}

// TestSessionDataLossRestartsFromConfirmed (onDataLoss, INV-1, INV-13):
// Kafka reports data loss (OUT_OF_ORDER_SEQUENCE_NUMBER after an earlier
// ack); the session confirms nothing past what it confirmed before the
// loss, ends with errDataLoss, and the next one starts from the slot's
// confirmed position and produces the transaction again.
func TestSessionDataLossRestartsFromConfirmed(t *testing.T) {
	t.Parallel()
	k := newKafkaFake(t)
	h := newSessionHarness(t, replicationtest.Config{}, func(cfg *config.Config) { cfg.Kafka.Brokers = k.ListenAddrs() })
	h.run(Deps{})
	before := h.pg.Append(row(1))
	first := h.waitFlush(before.End).PID

	k.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: harnessTopic, Partitions: []int32{0}, Err: kerr.OutOfOrderSequenceNumber, Count: 1})
	lost := h.pg.Append(row(2))
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	if err := h.pg.Wait(ctx, "a second session", func() bool { return h.pg.Starts() >= 2 }); err != nil {
		t.Fatal(err)
	}
	again := h.waitFlush(lost.End)
	if again.PID == first {
		t.Errorf("the session that saw the data loss confirmed %s, want it confirmed by the next session", again.Flush)
	}
	for _, st := range h.pg.Statuses() {
		if st.PID == first && st.Flush > before.End {
			t.Errorf("the session that saw the data loss confirmed %s, past %s, the end of the last transaction before it", st.Flush, before.End)
		}
	}
	if n := k.times("k2"); n < 2 {
		t.Errorf("k2 produced %d times, want it produced again by the next session", n)
	}
}

// TestSessionSkipsUpToCheckpoint (INV-11, exactly-once): the transactions
// at or before the Kafka checkpoint, whose anchor the WAL shows, are
// skipped, not produced again, although the slot and walpost_position are
// behind it (a crash lost them); the one after it is produced and
// confirmed.
func TestSessionSkipsUpToCheckpoint(t *testing.T) {
	t.Parallel()
	k := newKafkaFake(t)
	h := newSessionHarness(t, replicationtest.Config{}, exactlyOnce(k))
	h.pg.Append(row(1))
	last := h.pg.Append(row(2))
	after := h.pg.Append(row(3))

	// The checkpoint of a walpost that committed k1 and k2 to Kafka.
	h.checkpointTopic()
	w := h.transactional()
	if err := h.commitCheckpoint(w, last); err != nil {
		t.Fatal(err)
	}
	w.Close()

	h.run(Deps{})
	h.waitFlush(after.End)
	if got := k.keys(); got["k1"] != 0 || got["k2"] != 0 || got["k3"] == 0 {
		t.Errorf("produced %v, want k3 only: k1 and k2 are at or before the checkpoint's %s", got, last.End)
	}
}

// runOtherDuringInit starts the session (with deps) and runs other (what
// another walpost does) once, while the session's first InitProducerID is held,
// after its IDENTIFY_SYSTEM and its read of the slot; it returns once
// other ran, and fails the test when other failed.
func (h *sessionHarness) runOtherDuringInit(k *kafkaFake, deps Deps, other func() error) {
	h.t.Helper()
	var once sync.Once
	var err error
	done := make(chan struct{})
	k.ControlKey(int16(kmsg.InitProducerID), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.KeepControl()
		once.Do(func() {
			k.SleepControl(func() {
				defer close(done)
				err = other()
			})
		})
		return nil, nil, false
	})
	h.run(deps)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		h.t.Fatal("the session's producer never initialised")
	}
	if err != nil {
		h.t.Fatalf("the other walpost's checkpoint: %v", err)
	}
}

// TestSessionCheckpointPastStartWAL (INV-11, exactly-once, a takeover):
// another walpost of the slot streams, and commits a checkpoint past the
// WAL this session's IDENTIFY_SYSTEM saw at its start, until this
// session's InitProducerID fences it. The checkpoint is the newest truth
// about Kafka: the session compares it with the server's WAL as it is
// after the read, uses it, and sends none of its events again.
func TestSessionCheckpointPastStartWAL(t *testing.T) {
	t.Parallel()
	k := newKafkaFake(t)
	h := newSessionHarness(t, replicationtest.Config{}, exactlyOnce(k))
	h.checkpointTopic()
	other := h.transactional() // the walpost streaming before this one

	var last, after replicationtest.Txn
	// The session has identified the server; while its producer
	// initialises, the other walpost streams k1 and k2 and commits its
	// checkpoint past the WAL of that identification.
	h.runOtherDuringInit(k, Deps{}, func() error {
		h.pg.Append(row(1))
		last = h.pg.Append(row(2))
		return h.commitCheckpoint(other, last)
	})
	after = h.pg.Append(row(3))
	h.waitFlush(after.End)
	if got := k.keys(); got["k1"] != 0 || got["k2"] != 0 || got["k3"] == 0 {
		t.Errorf("produced %v, want k3 only: k1 and k2 are in the other walpost's checkpoint at %s", got, last.End)
	}
	if n := counterValue(t, h.f.m.cpRefused.WithLabelValues(refusedAhead)); n != 0 {
		t.Errorf("walpost_checkpoint_refused_total{reason=ahead_of_server} = %v, want 0: the checkpoint at %s is in the server's WAL", n, last.End)
	}
}

// TestSessionSlotConfirmedPastAnchorAtStart: while the session's producer
// initialises, the other walpost streams k1, k2 (and, with a partial
// transaction, the first row of (k3, k4)), commits its checkpoint
// anchored at k2's transaction, and confirms the slot past k2's, all after
// this session read the slot. The server starts the stream at the slot's
// position, after the anchor: the anchor cannot be seen and the slot
// vouches for it. The session must use the checkpoint (no not_in_wal
// refusal, nothing sent again), and no status update may report less
// than the slot held (INV-4), also while the outbox is quiet.
func TestSessionSlotConfirmedPastAnchorAtStart(t *testing.T) {
	t.Parallel()
	for _, partial := range []bool{true, false} {
		t.Run(fmt.Sprintf("partial=%v", partial), func(t *testing.T) {
			t.Parallel()
			k := newKafkaFake(t)
			h := newSessionHarness(t, replicationtest.Config{}, exactlyOnce(k))
			h.checkpointTopic()
			other := h.transactional()

			var confirmed pglogrepl.LSN
			logs := &lockedBuffer{}
			h.runOtherDuringInit(k, Deps{Logger: slog.New(slog.NewTextHandler(logs, nil))}, func() error {
				h.pg.Append(row(1))
				anchor := h.pg.Append(row(2))
				cp := kafka.TxnMark{Slot: h.cfg.Postgres.Slot, SystemID: 7, Timeline: 1, LSN: anchor.End,
					Anchored: true, AnchorCommitLSN: anchor.Commit, AnchorCommitTime: anchor.Time}
				if partial {
					p := h.pg.Append(row(3), row(4))
					cp.PartialCommitLSN, cp.PartialCommitTime, cp.Ordinal = p.Commit, p.Time, 1
				}
				if err := other.BeginTxn(); err != nil {
					return err
				}
				if err := other.CommitTxn(h.ctx, cp); err != nil {
					return err
				}
				confirmed = anchor.End
				h.pg.SetSlot(func(s *replicationtest.Slot) { s.Confirmed = anchor.End })
				return nil
			})
			if !partial {
				// Quiet: the session streams, with nothing to read, until a
				// status update went out.
				ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
				defer cancel()
				if err := h.pg.Wait(ctx, "a status update", func() bool { return len(h.pg.Statuses()) > 0 }); err != nil {
					t.Fatal(err)
				}
			}
			h.waitFlush(h.pg.Append(row(5)).End)
			want := map[string]int{"k5": 1}
			if partial {
				want["k4"] = 1
			}
			got := k.keys()
			for _, key := range []string{"k1", "k2", "k3", "k4", "k5"} {
				if got[key] != want[key] {
					t.Errorf("produced %v, want %v: the rest is in the other walpost's checkpoint", got, want)
					break
				}
			}
			if n := counterValue(t, h.f.m.cpRefused.WithLabelValues(refusedNotInWAL)); n != 0 {
				t.Errorf("walpost_checkpoint_refused_total{reason=not_in_wal} = %v, want 0: the slot's position vouches for the anchor", n)
			}
			for _, st := range h.pg.Statuses() {
				if st.Flush < confirmed {
					t.Errorf("status update flush %s, below the slot's %s when the session started streaming", st.Flush, confirmed)
				}
			}
			// The skip's report names where the stream started, not the
			// slot's position read before the other walpost confirmed.
			reports := regexp.MustCompile(`msg="skipped events already confirmed[^\n]* from_lsn=(\S+)`).FindAllStringSubmatch(logs.String(), -1)
			if len(reports) == 0 {
				t.Errorf("no skip report in the session's log:\n%s", logs)
			}
			for _, m := range reports {
				if from, err := pglogrepl.ParseLSN(m[1]); err != nil || from < confirmed {
					t.Errorf("skip report from_lsn=%s, want the slot's %s where the stream started", m[1], confirmed)
				}
			}
		})
	}
}

// TestSessionFenced (exactly-once, exactly.go): another producer of the
// slot's transactional id fences the session's. When another walsender
// holds the slot (a walpost took it over) Run ends with kafka.ErrFenced;
// when nobody does (the fencer lost the race for the slot),
// the session fails with errFencedHoldingSlot and the next one
// initialises the producer again and goes on.
func TestSessionFenced(t *testing.T) {
	t.Parallel()
	for _, taken := range []bool{true, false} {
		name := "slot free"
		if taken {
			name = "slot taken over"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			k := newKafkaFake(t)
			h := newSessionHarness(t, replicationtest.Config{}, exactlyOnce(k))
			h.run(Deps{})
			h.waitFlush(h.pg.Append(row(1)).End)

			h.transactional() // fences the session's producer
			if taken {
				h.pg.SetSlot(func(s *replicationtest.Slot) { s.ActivePID = 99999 })
			}
			fenced := h.pg.Append(row(2))
			if taken {
				err := h.waitExit(10 * time.Second)
				if !errors.Is(err, kafka.ErrFenced) || errors.Is(err, errFencedHoldingSlot) {
					t.Fatalf("Run: %v, want kafka.ErrFenced (another walpost holds the slot)", err)
				}
				if got := h.pg.MaxFlush(); got >= fenced.End {
					t.Errorf("confirmed %s, past the fenced transaction ending %s", got, fenced.End)
				}
				return
			}
			ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
			defer cancel()
			if err := h.pg.Wait(ctx, "a second session", func() bool {
				select {
				case <-h.exited:
					return true
				default:
				}
				return h.pg.Starts() >= 2
			}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-h.exited:
				t.Fatalf("Run ended: %v, want the session retried (errFencedHoldingSlot)", h.result())
			default:
			}
			h.waitFlush(fenced.End)
		})
	}
}

// TestSessionStatusWithinSenderTimeout (INV-6 with a short
// wal_sender_timeout): with the in-flight budget full (nothing
// acknowledged) the stream reads nothing, so only its periodic status
// updates keep the connection, which the walsender ends after
// wal_sender_timeout without one: they come at least every half of it,
// even when postgres.status_interval is longer.
func TestSessionStatusWithinSenderTimeout(t *testing.T) {
	t.Parallel()
	const sender = 2 * time.Second
	h := newSessionHarness(t, replicationtest.Config{SenderTimeout: sender}, func(c *config.Config) {
		c.Postgres.StatusInterval = 10 * time.Second
		c.Pipeline.MaxInFlightEvents = 1
	})
	s := newHeldSink()
	h.run(Deps{Sink: s})
	h.pg.Append(row(1))
	h.pg.Append(row(2))
	s.waitProduced(h.ctx, t, 1)
	n := len(h.pg.Statuses())
	if err := h.pg.Wait(h.ctx, "three more status updates while the budget is full", func() bool { return len(h.pg.Statuses()) >= n+3 }); err != nil {
		t.Fatal(err)
	}
	sts := h.pg.Statuses()
	for i := max(n, 1); i < len(sts); i++ {
		if gap := sts[i].At.Sub(sts[i-1].At); gap > sender/2+500*time.Millisecond {
			t.Errorf("status updates %d and %d came %s apart: the walsender (wal_sender_timeout %s) would end the session; want at most %s", i-1, i, gap, sender, sender/2)
		}
	}
}

// TestSessionReconnectsAtOnceAfterProgress (the reconnect back-off): a
// session the server ends after it confirmed events (an
// idle_session_timeout, an administrator) is followed by a new one within
// the first back-off step (≤ 1 s), however often it happens; without
// progress the back-off would double each time (1, 2, 4 s).
func TestSessionReconnectsAtOnceAfterProgress(t *testing.T) {
	t.Parallel()
	h := newSessionHarness(t, replicationtest.Config{}, nil)
	s := newHeldSink()
	h.run(Deps{Sink: s})
	for i := 1; i <= 4; i++ {
		if err := h.pg.Wait(h.ctx, "a session", func() bool { return h.pg.Starts() >= i }); err != nil {
			t.Fatal(err)
		}
		tx := h.pg.Append(row(i))
		s.waitProduced(h.ctx, t, i)
		s.ack(t, fmt.Sprintf("k%d", i))
		h.waitFlush(tx.End)
		if i == 4 {
			break
		}
		at := time.Now()
		h.pg.Disconnect()
		if err := h.pg.Wait(h.ctx, "the next session", func() bool { return h.pg.Starts() > i }); err != nil {
			t.Fatal(err)
		}
		if gap := time.Since(at); gap > 1500*time.Millisecond {
			t.Errorf("session %d began %s after the server ended session %d, which had confirmed its events: want the first back-off step (at most 1 s)", i+1, gap.Round(time.Millisecond), i)
		}
	}
}

// TestSessionStatusDuringSlowCommit (exactly-once, INV-6): a Kafka
// transaction's commit that takes longer than wal_sender_timeout (here
// EndTxn held 3 s against 2 s) does not silence the stream: it pauses
// while the transactor commits and goes on sending status updates at
// least every half of wal_sender_timeout, so the walsender keeps the
// session.
func TestSessionStatusDuringSlowCommit(t *testing.T) {
	t.Parallel()
	const sender = 2 * time.Second
	k := newKafkaFake(t)
	h := newSessionHarness(t, replicationtest.Config{SenderTimeout: sender}, func(c *config.Config) {
		exactlyOnce(k)(c)
		c.Postgres.StatusInterval = 10 * time.Second
	})
	h.run(Deps{})
	h.waitFlush(h.pg.Append(row(1)).End)

	var once sync.Once
	slow := make(chan struct{})
	k.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.KeepControl()
		once.Do(func() {
			close(slow)
			k.SleepControl(func() { time.Sleep(3 * time.Second) })
		})
		return nil, nil, false
	})
	n := len(h.pg.Statuses())
	h.pg.Append(row(2))
	<-slow
	h.pg.Append(row(3))
	h.waitFlush(h.pg.Append(row(4)).End)
	sts := h.pg.Statuses()
	for i := max(n, 1); i < len(sts); i++ {
		if gap := sts[i].At.Sub(sts[i-1].At); gap > sender/2+500*time.Millisecond {
			t.Errorf("status updates %d and %d came %s apart while a commit took 3 s: the walsender (wal_sender_timeout %s) would end the session; want at most %s", i-1, i, gap, sender, sender/2)
		}
	}
}

// TestSessionSlotTakenDuringInit: another walsender takes the slot while
// the session initialises its transactional producer (two walposts found
// it free at the same moment), and the coordinator answers
// CONCURRENT_TRANSACTIONS while the other's transaction is open, which
// franz-go asks again until the initialisation's 30 s end: the session
// gives up within a poll of the slot and stands by, and streams once the
// slot is free again.
func TestSessionSlotTakenDuringInit(t *testing.T) {
	t.Parallel()
	k := newKafkaFake(t)
	h := newSessionHarness(t, replicationtest.Config{}, exactlyOnce(k))
	var held atomic.Bool
	held.Store(true)
	var inits atomic.Int32
	k.ControlKey(int16(kmsg.InitProducerID), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.KeepControl()
		if !held.Load() {
			return nil, nil, false
		}
		inits.Add(1)
		h.pg.SetSlot(func(s *replicationtest.Slot) { s.ActivePID = 99999 })
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.ConcurrentTransactions.Code
		return resp, nil, true
	})
	h.run(Deps{})
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	if err := h.pg.Wait(ctx, "the session to stand by", func() bool {
		h.f.m.mu.Lock()
		defer h.f.m.mu.Unlock()
		return h.f.m.cur == stateWaitingForSlot
	}); err != nil {
		t.Fatalf("%v (%d InitProducerIDs answered CONCURRENT_TRANSACTIONS)", err, inits.Load())
	}
	held.Store(false)
	h.pg.SetSlot(func(s *replicationtest.Slot) { s.ActivePID = 0 })
	h.waitFlush(h.pg.Append(row(1)).End)
}
