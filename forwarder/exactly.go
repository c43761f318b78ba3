package forwarder

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/internal/kafkaconf"
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink/kafka"
)

// errFencedHoldingSlot: another walpost initialised this slot's
// transactional id while this one held the slot (it lost the race for a
// free slot after its InitProducerID and stands by). Retried: the next
// session initialises the producer again and resumes from the checkpoint.
var errFencedHoldingSlot = errors.New("kafka fenced this producer while this walpost held the slot (another walpost lost the race for it and stands by); the producer is initialised again")

// slotTakenOver says whether another walsender than this session's holds
// the slot (a walpost that took it over); an unreadable slot counts as
// taken. By the time a fenced session ended, its own stream has stopped
// and released the slot: a slot nobody else holds means the fencer lost
// the race for it and stands by.
func (s *session) slotTakenOver(conn *pgconn.PgConn) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var pid *int64
	err := s.pool.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, s.cfg.Postgres.Slot).Scan(&pid)
	taken := err != nil || (pid != nil && *pid != int64(conn.PID()))
	var holder int64
	if pid != nil {
		holder = *pid
	}
	s.log.Debug("fenced: is the slot held by another walsender", "slot", s.cfg.Postgres.Slot, "taken", taken, "active_pid", holder, "walsender_pid", conn.PID())
	return taken
}

// slotPoll is how often watchSlot asks whether another walsender took
// the slot.
const slotPoll = 100 * time.Millisecond

// watchSlot returns a context that ends, with a cause wrapping
// replication.ErrSlotActive, when another walsender holds the slot, and
// the function that stops the watch. The producer is initialised (and the
// checkpoint read) only after the session found the slot free, but two
// walposts that found it free at the same moment both initialise: the one
// that started streaming first is fenced, initialises again and opens a
// transaction, and the other's InitProducerID, answered
// CONCURRENT_TRANSACTIONS while that transaction is open and asked again
// by franz-go until its context ends, fences each new one, holding both
// back for the 30 s of the initialisation. Cancelled, it stands by.
func (s *session) watchSlot(ctx context.Context) (context.Context, func()) {
	if s.pool == nil {
		return ctx, func() {} // a session built without one (tests of single steps)
	}
	wctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(slotPoll)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-wctx.Done():
				return
			case <-tick.C:
			}
			qctx, qcancel := context.WithTimeout(wctx, 5*time.Second)
			var pid *int64
			err := s.pool.QueryRow(qctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, s.cfg.Postgres.Slot).Scan(&pid)
			qcancel()
			if err != nil && wctx.Err() == nil {
				s.log.Debug("watching the slot while the producer initialises: cannot read it", "slot", s.cfg.Postgres.Slot, "err", redact.String(err.Error()))
			}
			if err == nil && pid != nil {
				cancel(fmt.Errorf("%w: slot %q is streaming to PostgreSQL backend pid %d, which took it while this walpost initialised its producer", replication.ErrSlotActive, s.cfg.Postgres.Slot, *pid))
				return
			}
		}
	}()
	return wctx, func() {
		close(done)
		cancel(errWatchStopped) // ends a query under way
		<-stopped
	}
}

// errWatchStopped ends watchSlot's context when the initialisation is
// over.
var errWatchStopped = errors.New("the producer's initialisation is over")

// standBy is err, or, when err is the cancellation of ctx (watchSlot's)
// because another walsender took the slot, that reason: the session then
// stands by. Any other error (a refused ACL that came at the same moment)
// stays what it is.
func standBy(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); errors.Is(cause, replication.ErrSlotActive) && errors.Is(err, context.Canceled) {
		return cause
	}
	return err
}

// checkCheckpointTopic checks (or creates) the checkpoint topic; a topic
// that is missing or wrong wraps kafka.ErrCheckpointTopic (terminal),
// anything else is retried like an unreachable Kafka.
func (f *Forwarder) checkCheckpointTopic(ctx context.Context, cl *kgo.Client) error {
	cfg := f.cfg.Kafka
	created, err := kafka.EnsureCheckpointTopic(ctx, cl, cfg.CheckpointTopic, cfg.CreateTopicPartitions > 0)
	if created {
		f.log.Info("created the checkpoint topic", "topic", cfg.CheckpointTopic, "partitions", 1, "cleanup_policy", "compact")
	}
	return err
}

// openTxn builds this session's transactional producer, initialises its
// producer ID (fencing any earlier instance, and completing or aborting
// its open transaction) and only then reads the checkpoint (INV-10).
func (s *session) openTxn(ctx context.Context, id position.Identity) (*kafka.Sink, kafka.TxnMark, bool, error) {
	cfg := s.cfg
	var cp kafka.TxnMark
	kcfg, err := kafkaconf.ConfigFrom(cfg)
	if err != nil {
		return nil, cp, false, err
	}
	kcfg.TransactionalID = kafka.TransactionalID(cfg.Postgres.Slot, id.SystemID)
	kcfg.TransactionTimeout = cfg.Delivery.TransactionTimeout
	kcfg.CheckpointTopic = cfg.Kafka.CheckpointTopic
	s.hooks.apply(&kcfg)
	k, err := kafka.New(kcfg)
	if err != nil {
		return nil, cp, false, err
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ictx, taken := s.watchSlot(tctx)
	defer taken()
	if err := k.InitProducer(ictx); err != nil {
		k.Close()
		return nil, cp, false, standBy(ictx, err)
	}
	cl, err := kafkaconf.NewClient(cfg.Kafka)
	if err != nil {
		k.Close()
		return nil, cp, false, err
	}
	cp, found, rd, err := kafka.ReadCheckpointFrom(ictx, cl, cfg.Kafka.CheckpointTopic, kcfg.TransactionalID, true)
	cl.Close()
	if err != nil {
		k.Close()
		return nil, cp, false, standBy(ictx, fmt.Errorf("read the checkpoint: %w", err))
	}
	if found {
		s.log.Info("exactly-once: producer initialised, checkpoint read", "slot", cfg.Postgres.Slot, "transactional_id", kcfg.TransactionalID,
			"lsn", cp.LSN.String(), "timeline", cp.Timeline, "partial_commit_lsn", cp.PartialCommitLSN.String(), "ordinal", cp.Ordinal,
			"node", rd.Leader, "leader_epoch", rd.LeaderEpoch, "high_watermark", rd.HighWatermark, "offset", rd.Offset, "reads", rd.Reads)
	} else {
		s.log.Info("exactly-once: producer initialised, no checkpoint yet", "slot", cfg.Postgres.Slot, "transactional_id", kcfg.TransactionalID,
			"node", rd.Leader, "leader_epoch", rd.LeaderEpoch, "high_watermark", rd.HighWatermark, "reads", rd.Reads)
	}
	return k, cp, found, nil
}

// exactlyOnce returns the stream's handler in exactly-once mode: the
// transactor, behind a skipper of what the checkpoint (or
// walpost_position) says committed (INV-11). wal is the server's WAL
// position at the session's start (IDENTIFY_SYSTEM): a checkpoint is used
// only when it is consistent with the stored position and the server, and
// what it claims past walpost_position is verified against the WAL before
// it is confirmed (anchorCheck).
func (s *session) exactlyOnce(plan position.Plan, id position.Identity, wal pglogrepl.LSN, slot replication.SlotInfo, iso *isolator, tracker *checkpoint.Tracker, txs txnSink, cp kafka.TxnMark, found bool) (replication.Handler, *skipper, *transactor) {
	cfg := s.cfg
	name := cfg.Postgres.Slot
	if plan.TimelineChanged {
		s.timelineChanged(plan, id, slot)
	}
	use := found && cp.SystemID == id.SystemID && cp.Timeline == id.Timeline
	if found && !use {
		s.log.Warn("the checkpoint was written on another timeline; it is not used, and events after walpost_position's plan may be sent again",
			"slot", name, "checkpoint_timeline", cp.Timeline, "timeline", id.Timeline, "checkpoint_lsn", cp.LSN.String())
	}
	hold := max(plan.SkipTo, slot.ConfirmedFlush) // what PostgreSQL itself recorded
	if use {
		reason, why := s.checkpointRefusal(cp, wal)
		if reason != "" {
			use = false
			s.m.cpRefused.WithLabelValues(reason).Inc()
			s.log.Warn("exactly-once: the checkpoint is not used: "+why+"; only walpost_position is skipped up to, and the events after it are sent again",
				"slot", name, "checkpoint_lsn", cp.LSN.String(), "partial_commit_lsn", cp.PartialCommitLSN.String(), "ordinal", cp.Ordinal,
				"position_lsn", hold.String(), "server_wal_lsn", wal.String(), "reason", reason)
		}
	}
	var resume kafka.TxnMark
	if use {
		resume = cp
	}
	upTo := plan.SkipTo
	if use && cp.LSN > upTo {
		upTo = cp.LSN
	}
	resume.LSN = max(upTo, slot.ConfirmedFlush)
	tx := newTransactor(transactorConfig{
		Slot: name, Identity: id,
		Interval: cfg.Delivery.TransactionInterval, Records: cfg.Delivery.TransactionRecords, Bytes: cfg.Pipeline.MaxInFlightBytes / 2,
		Timeout: cfg.Kafka.FlushTimeout, MaxAttempts: cfg.Poison.MaxAttempts, Resume: resume, DefaultTopic: cfg.Kafka.Topic,
		Logger: s.log, OnCommit: s.m.onTxn, OnAck: s.m.onAck(cfg.Kafka.Topic), OnDataLoss: s.hooks.onDataLoss,
	}, txs, settler{tracker, s.pause}, &s.refused, iso)
	if upTo <= slot.ConfirmedFlush && resume.PartialCommitLSN == 0 {
		return tx, nil, tx
	}
	s.log.Info("exactly-once: transactions at or before the committed checkpoint are skipped",
		"slot", name, "slot_lsn", slot.ConfirmedFlush.String(), "skip_to", upTo.String(),
		"partial_commit_lsn", resume.PartialCommitLSN.String(), "ordinal", resume.Ordinal)
	sk := &skipper{next: tx, tracker: tracker, upTo: upTo, skipped: s.m.skipped.WithLabelValues("checkpoint"),
		log: s.log, slot: name, partial: resume.PartialCommitLSN, ordinal: resume.Ordinal, onSkip: tx.skipped}
	if use && cp.Anchored && (cp.LSN > hold || cp.PartialCommitLSN != 0) {
		if cp.LSN > hold {
			// INV-1: nothing past what PostgreSQL recorded is confirmed
			// before the WAL showed the checkpoint's anchor.
			tracker.Hold(hold)
		}
		refuted := cp
		sk.verify = &anchorCheck{cp: cp, hold: hold, tracker: tracker, log: s.log, slot: name,
			verified: cp.LSN <= hold,
			refute: func(reason string, err error) {
				s.m.cpRefused.WithLabelValues(reason).Inc()
				s.refuted = &refuted
				tx.stop(err)
			}}
	}
	return sk, sk, tx
}

// checkpointRefusal says why cp cannot be used on this server (reason ""
// when it can): walpost_position went back below what this process wrote
// (the database was restored), the checkpoint is past the server's WAL,
// or a session found it does not match the WAL.
func (s *session) checkpointRefusal(cp kafka.TxnMark, wal pglogrepl.LSN) (reason, why string) {
	switch {
	case s.wentBack:
		return refusedWentBack, "walpost_position went back below what this walpost wrote (the database was restored to an earlier point)"
	case cp.LSN > wal || cp.PartialCommitLSN > wal:
		return refusedAhead, "it is past the server's WAL (the server was restored to an earlier point, or walpost recover reset the position)"
	case s.refuted != nil && s.refuted.Equal(cp):
		return refusedNotInWAL, "an earlier session found that the server's WAL does not hold the transactions it names"
	}
	// A checkpoint written before checkpoints carried an anchor cannot be
	// verified against the WAL: bounded by the server's WAL above, it is
	// used as before.
	return "", ""
}

// timelineChanged counts and logs a session on another timeline than the
// stored position.
func (s *session) timelineChanged(plan position.Plan, id position.Identity, slot replication.SlotInfo) {
	s.m.timelineChanged.Inc()
	s.log.Warn("the timeline changed since walpost recorded its position; only transactions ending at or before the switch point are skipped: those after it and after the slot's position are sent again (LSNs past the switch point belong to the new timeline)",
		"slot", s.cfg.Postgres.Slot, "slot_lsn", slot.ConfirmedFlush.String(),
		"timeline", id.Timeline, "switch_point", plan.SwitchPoint.String(), "skip_to", plan.SkipTo.String())
}
