package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/kafkaconf"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// Exactly-once mode (delivery.mode = exactly-once; README, "Exactly-once
// mode"). The rows of the window before the gap, and after a failed
// recovery everything it had committed, may already be in committed Kafka
// transactions: produced again, read_committed consumers see them twice.
// So recover runs only with Options.AllowDuplicates, and then produces the
// gap inside Kafka transactions of the slot's transactional id, the last
// of which commits the checkpoint at the new slot's consistent point: the
// checkpoint topic then no longer names a position ahead of the reset row
// (a restored server's, or a slot's before it was lost), which the next
// walpost run would skip up to.

// errNeedsAllowDuplicates is the refusal of exactly-once mode without
// Options.AllowDuplicates.
var errNeedsAllowDuplicates = fmt.Errorf("%w: delivery.mode is exactly-once, and recover re-sends the rows of the window before the gap (and, after a recovery that failed half way, the rows it had committed), which may already be in committed Kafka transactions: read_committed consumers may see those records twice. "+
	"Every record carries its idempotency_key header, by which a consumer can drop the second copy. "+
	"To go on, run walpost recover --allow-duplicates: it produces the gap inside Kafka transactions and resets the slot's checkpoint in kafka.checkpoint_topic to the new slot's position", ErrRefused)

// TxnSink is what recover needs of the transactional sink (sink/kafka.Sink
// built with a TransactionalID).
type TxnSink interface {
	sink.Sink
	BeginTxn() error
	CommitTxn(ctx context.Context, cp kafka.TxnMark) error
	AbortTxn(ctx context.Context) error
}

// initTimeout bounds the producer's initialisation (InitProducerID), as
// walpost run's.
const initTimeout = 30 * time.Second

// openTxn builds the slot's transactional producer as walpost run does:
// transactional id kafka.TransactionalID(slot, id.SystemID),
// delivery.transaction_timeout, kafka.checkpoint_topic (checked, or created
// when kafka.create_topic_partitions > 0), and initialises its producer ID,
// which fences every earlier producer of the id and completes or aborts its
// open transaction.
func openTxn(ctx context.Context, cfg *config.Config, id position.Identity, log *slog.Logger) (*kafka.Sink, error) {
	kcfg, err := kafkaconf.ConfigFrom(cfg)
	if err != nil {
		return nil, err
	}
	kcfg.ClientID += "-recover"
	kcfg.TransactionalID = kafka.TransactionalID(cfg.Postgres.Slot, id.SystemID)
	kcfg.TransactionTimeout = cfg.Delivery.TransactionTimeout
	kcfg.CheckpointTopic = cfg.Kafka.CheckpointTopic
	kcfg.Logger = log.With("component", "kafka")
	ictx, cancel := context.WithTimeout(ctx, initTimeout)
	defer cancel()
	cl, err := kafkaconf.NewClient(cfg.Kafka)
	if err != nil {
		return nil, err
	}
	created, err := kafka.EnsureCheckpointTopic(ictx, cl, cfg.Kafka.CheckpointTopic, cfg.Kafka.CreateTopicPartitions > 0)
	cl.Close()
	if err != nil {
		return nil, err
	}
	if created {
		log.Info("created the checkpoint topic", "topic", cfg.Kafka.CheckpointTopic, "partitions", 1, "cleanup_policy", "compact")
	}
	k, err := kafka.New(kcfg)
	if err != nil {
		return nil, err
	}
	if err := k.InitProducer(ictx); err != nil {
		k.Close()
		return nil, err
	}
	log.Info("exactly-once: producer initialised", "slot", cfg.Postgres.Slot, "transactional_id", kcfg.TransactionalID)
	return k, nil
}

// checkpointAt is the slot's checkpoint at lsn on the server id.
func checkpointAt(slot string, id position.Identity, lsn pglogrepl.LSN) kafka.TxnMark {
	return kafka.TxnMark{Slot: slot, SystemID: id.SystemID, Timeline: id.Timeline, LSN: lsn}
}

// txnSender produces the gap through a producer inside Kafka transactions
// of at most per records each. Every transaction but the last commits a
// checkpoint at LSN 0, which claims nothing (the gap is not whole yet, and
// the marked position row keeps walpost run away until it is); the last
// one, in finish, commits the checkpoint at the new position.
type txnSender struct {
	p    *producer
	txs  TxnSink
	per  int
	none kafka.TxnMark // the checkpoint of the transactions before the last

	open  bool
	n     int // records in the open transaction
	txns  int // transactions committed
	fence bool
}

func newTxnSender(p *producer, txs TxnSink, per int, slot string, id position.Identity) *txnSender {
	return &txnSender{p: p, txs: txs, per: max(per, 1), none: checkpointAt(slot, id, 0)}
}

// produce produces ev in the open transaction, first committing it when it
// holds per records, and beginning one.
func (s *txnSender) produce(ctx context.Context, ev *outbox.Event) error {
	if s.open && s.n >= s.per {
		if err := s.commit(ctx, s.none); err != nil {
			return err
		}
	}
	if err := s.begin(); err != nil {
		return err
	}
	if err := s.p.produce(ctx, ev); err != nil {
		return err
	}
	s.n++
	return nil
}

// finish commits the last transaction (empty when the gap is) with cp.
func (s *txnSender) finish(ctx context.Context, cp kafka.TxnMark) error {
	if err := s.begin(); err != nil {
		return err
	}
	return s.commit(ctx, cp)
}

func (s *txnSender) begin() error {
	if s.open {
		return nil
	}
	if err := s.txs.BeginTxn(); err != nil {
		s.fence = kafka.Fenced(err)
		return err
	}
	s.open, s.n = true, 0
	return nil
}

// commit waits for every record's outcome and commits the open
// transaction with cp, only when none failed.
func (s *txnSender) commit(ctx context.Context, cp kafka.TxnMark) error {
	if err := s.p.wait(ctx); err != nil {
		return err
	}
	if err := s.txs.CommitTxn(ctx, cp); err != nil {
		s.fence = kafka.Fenced(err)
		return err
	}
	s.open = false
	s.txns++
	return nil
}

// abort aborts the open transaction after a failure (a fenced producer
// must not), within timeout.
func (s *txnSender) abort(ctx context.Context, timeout time.Duration, log *slog.Logger) {
	if !s.open || s.fence {
		return
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if err := s.txs.AbortTxn(actx); err != nil && !errors.Is(err, context.Canceled) {
		log.Warn("abort the kafka transaction of the failed recovery (the broker aborts it after delivery.transaction_timeout)", "error", err)
	}
	s.open = false
}
