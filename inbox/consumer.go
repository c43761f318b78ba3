package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
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
	// IdleTimeout is how long PostgreSQL lets a batch's transaction wait,
	// idle, for this consumer's next statement before it ends the
	// transaction and its connection (idle_in_transaction_session_timeout,
	// set for the batch's transaction only; FATAL 25P03). A consumer cut
	// off between its statements and its COMMIT (its machine gone, a
	// half-open connection, which the server does not notice for hours)
	// would otherwise hold its partitions' watermark rows, and the member
	// they are assigned to next would wait for them that long. The handler
	// runs inside the transaction: one that waits for something other than
	// the database for longer than IdleTimeout between two statements has
	// its batch ended every time (Run returns "terminating connection due
	// to idle-in-transaction timeout (SQLSTATE 25P03)") and needs a larger
	// one. It replaces, for the batch, a value set on the role or the
	// database. Default DefaultIdleTimeout; negative leaves the server's
	// setting; at most 24 days (PostgreSQL's limit).
	IdleTimeout time.Duration
	// KafkaOpts are added after the consumer's own options. Leave out
	// kgo.DisableAutoCommit and kgo.GreedyAutoCommit (the client refuses
	// them beside AutoCommitMarks) and kgo.OnPartitionsRevoked (it
	// replaces the commit of the marked offsets before a revocation and
	// when the consumer leaves). The consumer's own options set:
	// the consumer group, the topics, read_committed isolation, automatic
	// commits of the records applied (kgo.AutoCommitMarks; the interval is
	// kgo.AutoCommitInterval's, 5 s), rebalances blocked while a batch is
	// applied,
	// offsets read from the inbox's watermark rows when a partition is
	// assigned, and the start of a partition without either.
	KafkaOpts []kgo.Opt
	// Logger receives the consumer's own log lines; nil discards them.
	Logger *slog.Logger
}

// Consumer is a Kafka consumer group member that applies each polled
// batch in one database transaction through its Inbox. The offsets are
// kept in the watermark rows, in the same transaction as the effects: a
// partition assigned after a rebalance or a crash resumes from there, so
// a batch the database committed is not read again. The group's offsets
// in Kafka are committed in the background after the database (every 5
// s, and before partitions are revoked or the consumer leaves), for lag
// monitoring; no batch waits for them.
type Consumer struct {
	cfg ConsumerConfig
	log *slog.Logger
	// cache holds the watermarks this consumer last committed, so that a
	// batch of partitions it has seen needs no SELECT: the transaction's
	// first write is a compare-and-set UPDATE of them (applyCached).
	// Only Run's goroutine touches it.
	cache map[topicPartition]*mark
	// cached and stale count the batches applied the cached way and those
	// whose cached watermarks had changed (tests).
	cached, stale int
	// evs is the cached way's events, reused from batch to batch.
	evs []event
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
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
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
		// The watermark rows hold the offsets, committed with the
		// effects; the group's offsets in Kafka follow in the background
		// (every 5 s, kgo.AutoCommitInterval, and before partitions are
		// revoked or the client leaves) for lag monitoring and tools.
		kgo.AutoCommitMarks(),
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
			// Committed in the database: marked for the background Kafka
			// commit. A Kafka commit that is late or lost costs nothing: an
			// assigned partition resumes from its watermark row.
			cl.MarkCommitRecords(recs...)
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
		done, err := c.applyCached(ctx, recs)
		if !done {
			err = c.applyLocked(ctx, recs)
		}
		if err != nil {
			c.cache = nil
		}
		var pgErr *pgconn.PgError
		if err == nil || attempt == 5 || !errors.As(err, &pgErr) || (pgErr.Code != "40001" && pgErr.Code != "40P01") {
			return err
		}
		c.log.Info("batch rolled back by the database; applying it again", "sqlstate", pgErr.Code, "attempt", attempt)
	}
}

// handle is the effect of a batch: the handler on its new records.
func (c *Consumer) handle(ctx context.Context, tx pgx.Tx, fresh []*kgo.Record) error {
	if c.cfg.HandleBatch != nil {
		return c.cfg.HandleBatch(ctx, tx, fresh)
	}
	for _, r := range fresh {
		if err := c.cfg.Handle(ctx, tx, r); err != nil {
			return err
		}
	}
	return nil
}

// DefaultIdleTimeout is ConsumerConfig.IdleTimeout's default.
const DefaultIdleTimeout = time.Minute

// idleSQL bounds the batch's transaction's idle time
// (ConsumerConfig.IdleTimeout); $1 in milliseconds.
const idleSQL = `SELECT set_config('idle_in_transaction_session_timeout', $1, true)`

// idleArg is idleSQL's argument; ok is false when no bound is set.
func (c *Consumer) idleArg() (ms string, ok bool) {
	if c.cfg.IdleTimeout < 0 {
		return "", false
	}
	return strconv.FormatInt(min(max(c.cfg.IdleTimeout.Milliseconds(), 1), math.MaxInt32), 10), true
}

// boundIdle runs idleSQL in tx, when a bound is set (applyCached queues
// it in its batch instead).
func (c *Consumer) boundIdle(ctx context.Context, tx pgx.Tx) error {
	if ms, ok := c.idleArg(); ok {
		if _, err := tx.Exec(ctx, idleSQL, ms); err != nil {
			return fmt.Errorf("inbox: bound the transaction's idle time: %w", err)
		}
	}
	return nil
}

// applyLocked is a batch through Inbox.ApplyBatch: the watermarks locked
// and read, then written. It fills the cache.
func (c *Consumer) applyLocked(ctx context.Context, recs []*kgo.Record) error {
	var marks map[topicPartition]*mark
	err := pgx.BeginFunc(ctx, c.cfg.DB, func(tx pgx.Tx) error {
		if err := c.boundIdle(ctx, tx); err != nil {
			return err
		}
		var err error
		_, marks, err = c.cfg.Inbox.runMarks(ctx, pgxQuerier{tx}, recs, func(fresh []*kgo.Record) error {
			return c.handle(ctx, tx, fresh)
		})
		return err
	})
	if err == nil {
		c.remember(marks)
	}
	return err
}

func (c *Consumer) remember(marks map[topicPartition]*mark) {
	if c.cache == nil {
		c.cache = map[topicPartition]*mark{}
	}
	for tp, m := range marks {
		m.changed, m.moved = false, false
		c.cache[tp] = m
	}
}

// applyCached applies a batch whose partitions are all in the cache
// without reading the watermarks (Invariant 2): the rules run on the
// cached ones, and the transaction's first write (after the idle bound)
// writes the new ones only where each row still holds the cached one
// (commit LSN, number of keys and next offset: every change moves one of
// them), which takes the rows' locks. If another
// member wrote a watermark meanwhile, fewer rows match, nothing was
// applied, and the batch goes the locked way (done false).
func (c *Consumer) applyCached(ctx context.Context, recs []*kgo.Record) (done bool, err error) {
	if len(c.cache) == 0 {
		return false, nil
	}
	in := c.cfg.Inbox
	evs, err := parseAllInto(c.evs, recs)
	c.evs = evs
	if err != nil {
		return true, err
	}
	marks := map[topicPartition]*mark{}
	var rows []casJSON
	for _, ev := range evs {
		tp := topicPartition{ev.rec.Topic, ev.rec.Partition}
		if _, ok := marks[tp]; ok {
			continue
		}
		cm, ok := c.cache[tp]
		if !ok {
			return false, nil
		}
		marks[tp] = &mark{lsn: cm.lsn, keys: slices.Clone(cm.keys), nextOffset: cm.nextOffset}
		rows = append(rows, casJSON{Topic: tp.topic, Partition: tp.partition, OldLSN: cm.lsn.String(), OldKeys: len(cm.keys), OldNext: cm.nextOffset})
	}
	p := in.plan(evs, marks)
	for i := range rows {
		m := marks[topicPartition{rows[i].Topic, rows[i].Partition}]
		rows[i].LSN, rows[i].Keys, rows[i].Next = m.lsn.String(), m.keys, m.nextOffset
	}
	arg, err := json.Marshal(rows)
	if err != nil {
		return true, err
	}
	tx, err := c.cfg.DB.Begin(ctx)
	if err != nil {
		return true, fmt.Errorf("inbox: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// The idle bound, the compare-and-set and the key rows go in one
	// round trip, the bound before the compare-and-set (which takes the
	// rows' locks). When it finds a
	// row changed, the key rows go with the rollback.
	b := &pgx.Batch{}
	ms, bound := c.idleArg()
	if bound {
		b.Queue(idleSQL, ms)
	}
	b.Queue(casSQL, in.cfg.Group, string(arg))
	var keys []byte
	if len(p.cands) > 0 {
		if keys, err = keysArg(p); err != nil {
			return true, err
		}
		b.Queue(keysSQL, in.cfg.Group, string(keys))
	}
	br := tx.SendBatch(ctx, b)
	if bound {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return true, fmt.Errorf("inbox: bound the transaction's idle time: %w", err)
		}
	}
	tag, err := br.Exec()
	if err != nil {
		_ = br.Close()
		return true, fmt.Errorf("inbox: write the watermarks: %w", err)
	}
	if tag.RowsAffected() != int64(len(rows)) {
		_ = br.Close()
		c.log.Debug("a watermark changed since this consumer wrote it; reading them again")
		c.cache = nil
		c.stale++
		return false, nil
	}
	var inserted map[topicKey]bool
	if len(p.cands) > 0 {
		rs, err := br.Query()
		if err == nil {
			inserted, err = scanKeys(rs)
		}
		if err != nil {
			_ = br.Close()
			return true, fmt.Errorf("inbox: record %d keys: %w", len(p.cands), err)
		}
	}
	if err := br.Close(); err != nil {
		return true, fmt.Errorf("inbox: write the watermarks: %w", err)
	}
	fresh := p.resolve(inserted)
	if len(fresh) > 0 {
		if err := c.handle(ctx, tx, fresh); err != nil {
			return true, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return true, err
	}
	c.remember(marks)
	c.cached++
	return true, nil
}

// casJSON is a watermark's cached and new values for casSQL.
type casJSON struct {
	Topic     string   `json:"t"`
	Partition int32    `json:"p"`
	LSN       string   `json:"l"`
	Keys      []string `json:"k"`
	Next      int64    `json:"n"`
	OldLSN    string   `json:"ol"`
	OldKeys   int      `json:"oc"`
	OldNext   int64    `json:"o"`
}

// casSQL writes each watermark of $2 where its row holds the old values.
const casSQL = `UPDATE inbox_watermark w SET commit_lsn = x.l::pg_lsn,
	keys = ARRAY(SELECT jsonb_array_elements_text(x.k)), next_offset = x.n, updated_at = now()
	FROM jsonb_to_recordset($2::jsonb) AS x(t text, p int, l text, k jsonb, n bigint, ol text, oc int, o bigint)
	WHERE w.consumer_group = $1 AND w.topic = x.t AND w.partition = x.p
	AND w.commit_lsn = x.ol::pg_lsn AND cardinality(w.keys) = x.oc AND w.next_offset = x.o`

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
	// Bounded as a batch is: cut off before its ROLLBACK, it would hold
	// a lock on inbox_watermark that blocks DDL on it.
	if err := c.boundIdle(ctx, rows); err != nil {
		return nil, err
	}
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
