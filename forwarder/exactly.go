package forwarder

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink/kafka"
)

// eos says whether delivery.mode is exactly-once (DESIGN.md,
// "Exactly-once delivery").
func (f *Forwarder) eos() bool { return f.cfg.Delivery.Mode == config.ExactlyOnce }

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
func (f *Forwarder) openTxn(ctx context.Context, id position.Identity) (*kafka.Sink, kafka.Checkpoint, bool, error) {
	cfg := f.cfg
	var cp kafka.Checkpoint
	kcfg, err := kafka.ConfigFrom(cfg)
	if err != nil {
		return nil, cp, false, err
	}
	kcfg.TransactionalID = kafka.TransactionalID(cfg.Postgres.Slot, id.SystemID)
	kcfg.TransactionTimeout = cfg.Delivery.TransactionTimeout
	kcfg.CheckpointTopic = cfg.Kafka.CheckpointTopic
	kcfg.ProducerOpts = []kgo.Opt{kgo.WithHooks(kprom.NewMetrics("walpost_kafka", kprom.Registerer(f.reg)))}
	kcfg.Logger = f.log.With("component", "kafka")
	kcfg.OnDataLoss = f.onDataLoss
	k, err := kafka.New(kcfg)
	if err != nil {
		return nil, cp, false, err
	}
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := k.InitProducer(ictx); err != nil {
		k.Close()
		return nil, cp, false, err
	}
	cl, err := kafka.NewClient(cfg.Kafka)
	if err != nil {
		k.Close()
		return nil, cp, false, err
	}
	cp, found, err := kafka.ReadCheckpoint(ictx, cl, cfg.Kafka.CheckpointTopic, kcfg.TransactionalID)
	cl.Close()
	if err != nil {
		k.Close()
		return nil, cp, false, fmt.Errorf("read the checkpoint: %w", err)
	}
	if found {
		f.log.Info("exactly-once: producer initialised, checkpoint read", "slot", cfg.Postgres.Slot, "transactional_id", kcfg.TransactionalID,
			"lsn", cp.LSN.String(), "timeline", cp.Timeline, "partial_commit_lsn", cp.PartialCommitLSN.String(), "ordinal", cp.Ordinal)
	} else {
		f.log.Info("exactly-once: producer initialised, no checkpoint yet", "slot", cfg.Postgres.Slot, "transactional_id", kcfg.TransactionalID)
	}
	return k, cp, found, nil
}

// exactlyOnce returns the stream's handler in exactly-once mode: the
// transactor, behind a skipper of what the checkpoint (or
// walpost_position) says committed (INV-11).
func (f *Forwarder) exactlyOnce(plan position.Plan, id position.Identity, slot replication.SlotInfo, iso *Isolator, tracker *checkpoint.Tracker,
	txs TxnSink, cp kafka.Checkpoint, found bool) (replication.Handler, *skipper, *transactor) {
	cfg := f.cfg
	name := cfg.Postgres.Slot
	use := found && cp.SystemID == id.SystemID && cp.Timeline == id.Timeline
	if found && !use {
		f.log.Warn("the checkpoint was written on another timeline; it is not used, and events after walpost_position's plan may be sent again",
			"slot", name, "checkpoint_timeline", cp.Timeline, "timeline", id.Timeline, "checkpoint_lsn", cp.LSN.String())
	}
	var resume kafka.Checkpoint
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
		Logger: f.log, OnCommit: f.m.onTxn, OnAck: f.m.onAck(cfg.Kafka.Topic),
	}, txs, tracker, &f.refused, iso)
	if upTo <= slot.ConfirmedFlush && resume.PartialCommitLSN == 0 {
		return tx, nil, tx
	}
	f.log.Info("exactly-once: transactions at or before the committed checkpoint are skipped",
		"slot", name, "slot_lsn", slot.ConfirmedFlush.String(), "skip_to", upTo.String(),
		"partial_commit_lsn", resume.PartialCommitLSN.String(), "ordinal", resume.Ordinal)
	s := &skipper{next: tx, tracker: tracker, upTo: upTo, skipped: f.m.skipped.WithLabelValues("checkpoint"),
		log: f.log, slot: name, from: slot.ConfirmedFlush, partial: resume.PartialCommitLSN, ordinal: resume.Ordinal}
	return s, s, tx
}
