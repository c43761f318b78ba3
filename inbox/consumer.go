package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DB is the consumer's database: a *pgxpool.Pool or a *pgx.Conn.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// ConsumerConfig configures a Consumer.
type ConsumerConfig struct {
	// Inbox records the effects; its Group is the Kafka consumer group.
	// Required.
	Inbox *Inbox
	// DB is where the effects and the inbox's tables are. Required.
	DB DB
	// Brokers are the seed brokers. Required unless KafkaOpts has
	// kgo.SeedBrokers.
	Brokers []string
	// Topics are consumed. Required.
	Topics []string
	// Handle is called for each new record, in the batch's transaction,
	// records of one partition in offset order. Exactly one of Handle and
	// HandleBatch is set.
	Handle func(ctx context.Context, tx pgx.Tx, rec *kgo.Record) error
	// HandleBatch is called once per polled batch with its new records,
	// in the batch's transaction.
	HandleBatch func(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error
	// MaxPollRecords bounds a batch (one database transaction). Default
	// 1000.
	MaxPollRecords int
	// PruneEvery is how often Run calls Inbox.Prune when the inbox has a
	// KeepFor. Default 1h.
	PruneEvery time.Duration
	// KafkaOpts are added after the consumer's own options, which set:
	// the consumer group, the topics, read_committed isolation, no
	// automatic commits, rebalances blocked while a batch is applied,
	// offsets read from the inbox's watermark rows when a partition is
	// assigned, and the start of a partition without either.
	KafkaOpts []kgo.Opt
	// Logger receives the consumer's own log lines; nil discards them.
	Logger *slog.Logger
}

// Consumer is a Kafka consumer group member that applies each polled
// batch in one database transaction through its Inbox, then commits the
// offsets to Kafka. The offsets are also kept in the watermark rows, in
// the same transaction as the effects: a partition assigned after a
// rebalance or a crash resumes from there, so a batch the database
// committed is not read again even when the Kafka commit was lost.
type Consumer struct {
	cfg ConsumerConfig
	log *slog.Logger
}

// NewConsumer checks cfg.
func NewConsumer(cfg ConsumerConfig) (*Consumer, error) {
	switch {
	case cfg.Inbox == nil:
		return nil, errors.New("inbox: ConsumerConfig.Inbox is required")
	case cfg.DB == nil:
		return nil, errors.New("inbox: ConsumerConfig.DB is required")
	case len(cfg.Topics) == 0:
		return nil, errors.New("inbox: ConsumerConfig.Topics is required")
	case (cfg.Handle == nil) == (cfg.HandleBatch == nil):
		return nil, errors.New("inbox: set exactly one of ConsumerConfig.Handle and HandleBatch")
	}
	if cfg.MaxPollRecords <= 0 {
		cfg.MaxPollRecords = 1000
	}
	if cfg.PruneEvery <= 0 {
		cfg.PruneEvery = time.Hour
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Consumer{cfg: cfg, log: log}, nil
}

// Run consumes until ctx ends (then it returns nil) or a batch fails: the
// handler's or the database's error is returned, and the batch's records,
// not committed anywhere, come again to the next Run. Killing the process
// at any instant loses nothing and applies nothing twice.
func (c *Consumer) Run(ctx context.Context) error {
	opts := []kgo.Opt{
		kgo.ConsumerGroup(c.cfg.Inbox.Group()),
		kgo.ConsumeTopics(c.cfg.Topics...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.AdjustFetchOffsetsFn(c.storedOffsets),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}
	if len(c.cfg.Brokers) > 0 {
		opts = append(opts, kgo.SeedBrokers(c.cfg.Brokers...))
	}
	cl, err := kgo.NewClient(append(opts, c.cfg.KafkaOpts...)...)
	if err != nil {
		return fmt.Errorf("inbox: kafka client: %w", err)
	}
	defer cl.Close()
	lastPrune := time.Now()
	for {
		fetches := cl.PollRecords(ctx, c.cfg.MaxPollRecords)
		if ctx.Err() != nil {
			cl.AllowRebalance()
			return nil
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			c.log.Warn("fetch failed; the client retries", "topic", topic, "partition", partition, "err", err.Error())
		})
		if recs := fetches.Records(); len(recs) > 0 {
			if err := c.apply(ctx, recs); err != nil {
				cl.AllowRebalance()
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			// The database holds the offsets too: a lost commit costs a
			// re-read at the next start without lookups, nothing more.
			if err := cl.CommitRecords(ctx, recs...); err != nil && ctx.Err() == nil {
				c.log.Warn("kafka offset commit failed; the watermark rows hold the offsets", "err", err.Error())
			}
		}
		cl.AllowRebalance()
		if time.Since(lastPrune) >= c.cfg.PruneEvery {
			lastPrune = time.Now()
			if n, err := c.cfg.Inbox.Prune(ctx, c.cfg.DB); err != nil {
				c.log.Warn("prune failed", "err", err.Error())
			} else if n > 0 {
				c.log.Info("pruned key rows", "rows", n)
			}
		}
	}
}

// apply runs one batch in one transaction, again after a deadlock or a
// serialization failure (two members of the group on one key).
func (c *Consumer) apply(ctx context.Context, recs []*kgo.Record) error {
	for attempt := 1; ; attempt++ {
		err := c.applyOnce(ctx, recs)
		var pgErr *pgconn.PgError
		if err == nil || attempt == 5 || !errors.As(err, &pgErr) || (pgErr.Code != "40001" && pgErr.Code != "40P01") {
			return err
		}
		c.log.Info("batch rolled back by the database; applying it again", "sqlstate", pgErr.Code, "attempt", attempt)
	}
}

func (c *Consumer) applyOnce(ctx context.Context, recs []*kgo.Record) error {
	return pgx.BeginFunc(ctx, c.cfg.DB, func(tx pgx.Tx) error {
		_, err := c.cfg.Inbox.ApplyBatch(ctx, tx, recs, func(ctx context.Context, tx pgx.Tx, fresh []*kgo.Record) error {
			if c.cfg.HandleBatch != nil {
				return c.cfg.HandleBatch(ctx, tx, fresh)
			}
			for _, r := range fresh {
				if err := c.cfg.Handle(ctx, tx, r); err != nil {
					return err
				}
			}
			return nil
		})
		return err
	})
}

const offsetsSQL = `SELECT topic, partition, next_offset FROM inbox_watermark
	WHERE consumer_group = $1 AND topic = ANY($2) AND next_offset >= 0`

// storedOffsets starts each assigned partition at the offset its
// watermark row holds, when it holds one.
func (c *Consumer) storedOffsets(ctx context.Context, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	topics := make([]string, 0, len(offs))
	for t := range offs {
		topics = append(topics, t)
	}
	rows, err := c.cfg.DB.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("inbox: read the stored offsets: %w", err)
	}
	defer func() { _ = rows.Rollback(ctx) }()
	rs, err := rows.Query(ctx, offsetsSQL, c.cfg.Inbox.Group(), topics)
	if err != nil {
		return nil, fmt.Errorf("inbox: read the stored offsets: %w", err)
	}
	defer rs.Close()
	for rs.Next() {
		var topic string
		var partition int32
		var next int64
		if err := rs.Scan(&topic, &partition, &next); err != nil {
			return nil, fmt.Errorf("inbox: read the stored offsets: %w", err)
		}
		if ps, ok := offs[topic]; ok {
			if _, ok := ps[partition]; ok {
				ps[partition] = kgo.NewOffset().At(next).WithEpoch(-1)
			}
		}
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("inbox: read the stored offsets: %w", err)
	}
	return offs, nil
}
