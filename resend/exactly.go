package resend

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/kafkaconf"
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink/kafka"
)

// Exactly-once mode (delivery.mode = exactly-once; README, "Exactly-once
// mode"). Resent records go inside Kafka transactions, so read_committed
// consumers see each one once, or none of an aborted resend. The
// transactional id is resend's own, resendTxnID: the slot's id belongs
// to the walpost run streaming beside it, which initialising it would
// fence. Each commit writes a checkpoint record (CommitTxn always does)
// under the key of the pseudo-slot "<slot>-resend" at LSN 0, which claims
// nothing: walpost run reads only its slot's key.
//
// A transaction is open at most delivery.transaction_interval (or
// delivery.transaction_records rows): read_committed consumers of a
// partition wait at the first open transaction's first record, the live
// stream's records behind it included.

// initTimeout bounds the producer's initialisation, as walpost run's.
const initTimeout = 30 * time.Second

// resendTxnID is resend's transactional id for the slot on a system: the
// slot's own id with "-resend" appended (slot names never contain "-",
// so it is no slot's id).
func resendTxnID(slot string, systemID int64) string {
	return kafka.TransactionalID(slot, systemID) + "-resend"
}

// openTxn identifies the server (IDENTIFY_SYSTEM, which reads no slot)
// and builds resend's transactional producer: kafka.checkpoint_topic
// checked (or created when kafka.create_topic_partitions > 0), the
// producer ID initialised, which fences an earlier resend of the same
// slot and completes or aborts its open transaction.
func openTxn(ctx context.Context, cfg *config.Config, log *slog.Logger) (*kafka.Sink, position.Identity, error) {
	repl, err := replication.ConnectReplication(ctx, cfg.Postgres.URL)
	if err != nil {
		return nil, position.Identity{}, redact.Error(fmt.Errorf("replication connection (for the system identifier): %w", err))
	}
	id, err := position.Identify(ctx, repl)
	repl.Close(context.Background())
	if err != nil {
		return nil, id, err
	}
	kcfg, err := kafkaconf.ConfigFrom(cfg)
	if err != nil {
		return nil, id, err
	}
	kcfg.ClientID += "-resend"
	kcfg.TransactionalID = resendTxnID(cfg.Postgres.Slot, id.SystemID)
	kcfg.TransactionTimeout = cfg.Delivery.TransactionTimeout
	kcfg.CheckpointTopic = cfg.Kafka.CheckpointTopic
	kcfg.Logger = log.With("component", "kafka")
	ictx, cancel := context.WithTimeout(ctx, initTimeout)
	defer cancel()
	cl, err := kafkaconf.NewClient(cfg.Kafka)
	if err != nil {
		return nil, id, err
	}
	created, err := kafka.EnsureCheckpointTopic(ictx, cl, cfg.Kafka.CheckpointTopic, cfg.Kafka.CreateTopicPartitions > 0)
	cl.Close()
	if err != nil {
		return nil, id, err
	}
	if created {
		log.Info("created the checkpoint topic", "topic", cfg.Kafka.CheckpointTopic, "partitions", 1, "cleanup_policy", "compact")
	}
	k, err := kafka.New(kcfg)
	if err != nil {
		return nil, id, err
	}
	if err := k.InitProducer(ictx); err != nil {
		k.Close()
		return nil, id, err
	}
	log.Info("exactly-once: resend's producer initialised", "transactional_id", kcfg.TransactionalID)
	return k, id, nil
}
