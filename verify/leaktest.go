package verify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walpost/walpost/replication"
)

// LeakTest writes recognisable events through a real outbox table and
// checks, from the topic, that a running walpost delivered every one of
// them in order. It does not forward anything itself. `walpost verify`
// is a thin wrapper around it; the verdict comes from Validate, the same
// validator the integration tests use.
//
// Keys are walpost-verify-<runid>-w<writer>-t<txn>-r<row>, so a run
// recognises its own records among everything else on the topic.
type LeakTest struct {
	PostgresURL string
	Table       string // outbox table, as in postgres.table
	Brokers     []string
	Topic       string // the topic rows with a NULL topic column go to (kafka.topic)

	// KafkaOpts are extra options for every Kafka client the test creates,
	// its admin client and its consumer: the connection options (TLS,
	// SASL, dialer, timeouts) walpost run uses for the same cluster.
	// They come after the seed brokers and the client id
	// (walpost-verify-admin, walpost-verify), so they may replace those,
	// and before the consumer's own partitions, start offsets, fetch wait
	// and hook, which they do not replace. `walpost verify` passes
	// internal/kafkaconf.ClientOpts, so kafka.tls.* and kafka.sasl.* apply.
	// Default none: plaintext, no authentication.
	KafkaOpts []kgo.Opt

	Events       int           // events to write
	Writers      int           // concurrent writers, one connection each
	MaxTxnSize   int           // each transaction has 1..MaxTxnSize rows, uniformly
	PayloadBytes int           // approximate size of each payload's JSON text
	Timeout      time.Duration // after the last commit, how long to wait for delivery
	Settle       time.Duration // once everything arrived, how long to keep reading for duplicates (default 1s)
	KeepRows     bool          // leave the written rows in the outbox table (default: delete them at the end)

	RunID string // random when empty

	// Isolation is the consumer's isolation level: "read_uncommitted"
	// (default: every record Kafka holds, also of aborted transactions)
	// or "read_committed" (what exactly-once consumers read).
	Isolation string
	// ExactlyOnce counts duplicates as a failure (delivery.mode
	// exactly-once promises none to read_committed consumers).
	ExactlyOnce bool

	// A LeakTest runs once.

	written   atomic.Int64
	delivered atomic.Int64
	phase     atomic.Value // string
	started   atomic.Int64 // unix nanos
}

// Progress is a snapshot of a running LeakTest.
type Progress struct {
	Phase     string // "preparing", "writing", "waiting", "settling", "cleaning up", "done"
	Total     int
	Written   int
	Delivered int // distinct keys of this run seen on the topic
	Elapsed   time.Duration
}

// Progress may be called from any goroutine while Run runs.
func (l *LeakTest) Progress() Progress {
	p := Progress{Total: l.Events, Written: int(l.written.Load()), Delivered: int(l.delivered.Load())}
	if s, ok := l.phase.Load().(string); ok {
		p.Phase = s
	}
	if st := l.started.Load(); st != 0 {
		p.Elapsed = time.Since(time.Unix(0, st))
	}
	return p
}

// Prefix is the key prefix of the run's events.
func (l *LeakTest) Prefix() string { return "walpost-verify-" + l.RunID + "-" }

func (l *LeakTest) defaults() error {
	var errs []error
	if l.PostgresURL == "" {
		errs = append(errs, errors.New("no PostgreSQL URL"))
	}
	if len(l.Brokers) == 0 {
		errs = append(errs, errors.New("no Kafka brokers"))
	}
	if l.Table == "" {
		l.Table = "outbox"
	}
	if l.Topic == "" {
		errs = append(errs, errors.New("no topic"))
	}
	if l.Events < 1 {
		errs = append(errs, fmt.Errorf("events = %d: at least 1", l.Events))
	}
	if l.Writers < 1 {
		errs = append(errs, fmt.Errorf("writers = %d: at least 1", l.Writers))
	}
	if l.MaxTxnSize < 1 {
		errs = append(errs, fmt.Errorf("txn size = %d: at least 1", l.MaxTxnSize))
	}
	if l.PayloadBytes < 0 {
		errs = append(errs, fmt.Errorf("payload bytes = %d: at least 0", l.PayloadBytes))
	}
	if l.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("timeout = %s: must be positive", l.Timeout))
	}
	if l.Settle == 0 {
		l.Settle = time.Second
	}
	if l.RunID == "" {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		l.RunID = hex.EncodeToString(b)
	}
	return errors.Join(errs...)
}

// Payload returns the JSON payload of the run's events: about PayloadBytes
// bytes of JSON text (never less than the fixed part).
func (l *LeakTest) Payload() string {
	head := `{"walpost_verify": "` + l.RunID + `", "pad": "`
	tail := `"}`
	pad := max(l.PayloadBytes-len(head)-len(tail), 0)
	return head + strings.Repeat("x", pad) + tail
}

// writeState is what the writers share.
type writeState struct {
	mu       sync.Mutex
	expected []Expected
	commits  map[string]time.Time // txn → client clock right after COMMIT returned
	txns     int
}

// consumeState is owned by the consumer goroutine until it ends.
type consumeState struct {
	observed    []Observed
	firstSeen   map[string]time.Time
	noCommitLSN int
	err         error // first fetch error, for a report that nothing arrived
}

// Run writes the events, waits for them on the topic and returns the
// report. An error means the test could not run (connection, missing
// table or topic, a failed write); a cancelled ctx ends the run early
// with Interrupted set.
func (l *LeakTest) Run(ctx context.Context) (*Result, error) {
	if err := l.defaults(); err != nil {
		return nil, err
	}
	start := time.Now()
	l.started.Store(start.UnixNano())
	l.phase.Store("preparing")
	defer l.phase.Store("done")

	// Kafka: the end offsets before anything is written.
	admCl, err := l.kafkaClient("walpost-verify-admin")
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	defer admCl.Close()
	starts, err := endOffsets(ctx, kadm.NewClient(admCl), l.Topic)
	if err != nil {
		return nil, fmt.Errorf("kafka (brokers %v): %w", l.Brokers, err)
	}

	// PostgreSQL: the outbox table as walpost resolves it.
	pool, err := l.openPool(ctx)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	table, err := resolveTable(ctx, pool, l.Table)
	if err != nil {
		return nil, err
	}
	insertSQL := fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload, event_type) VALUES ($1, $2, 'walpost.verify')`, table)

	// The consumer starts before the first write, at the offsets taken above.
	prefix := l.Prefix()
	cons, ready, err := l.consumer(ctx, admCl, starts)
	if err != nil {
		return nil, err
	}
	defer cons.Close()
	cctx, ccancel := context.WithCancel(context.Background())
	defer ccancel()
	cs := &consumeState{firstSeen: make(map[string]time.Time, l.Events)}
	consDone := make(chan struct{})
	go func() {
		defer close(consDone)
		l.consume(cctx, cons, prefix, cs)
	}()

	// The first write waits until the consumer's fetches are at the
	// brokers, so that consumer start-up does not count as latency.
	select {
	case <-ready.ch:
	case <-time.After(10 * time.Second):
	case <-ctx.Done():
	}

	// Writers.
	l.phase.Store("writing")
	ws := &writeState{commits: map[string]time.Time{}}
	writeStart := time.Now()
	writeErr := l.write(ctx, pool, insertSQL, prefix, ws)
	writesDone := time.Now()
	res := &Result{
		RunID: l.RunID, Table: table, Topic: l.Topic, Events: l.Events, Writers: l.Writers,
		MaxTxnSize: l.MaxTxnSize, PayloadBytes: l.PayloadBytes, WriteElapsed: Millis(writesDone.Sub(writeStart)),
		Timeout: Millis(l.Timeout),
	}
	if writeErr != nil {
		ccancel()
		<-consDone
		l.cleanup(pool, table, ws.expected, res)
		return nil, fmt.Errorf("postgres: write to %s: %w", table, writeErr)
	}

	// Wait for delivery.
	l.phase.Store("waiting")
	l.awaitDelivery(ctx, int64(len(ws.expected)), res)
	ccancel()
	<-consDone
	if ctx.Err() != nil {
		res.Interrupted = true
	}
	res.Elapsed = Millis(time.Since(start))
	l.phase.Store("cleaning up")
	l.cleanup(pool, table, ws.expected, res)

	l.summarise(res, ws, cs, starts)
	return res, nil
}

// openPool opens the pool of the writers and of the cleanup.
func (l *LeakTest) openPool(ctx context.Context) (*pgxpool.Pool, error) {
	pcfg, err := replication.PoolConfig(l.PostgresURL)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	pcfg.MaxConns = int32(l.Writers + 1)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return pool, nil
}

// consumer is the topic's consumer from the offsets starts, with the hook that tells when its fetches reach the brokers.
func (l *LeakTest) consumer(ctx context.Context, admCl *kgo.Client, starts map[int32]int64) (*kgo.Client, *fetchReady, error) {
	parts := map[int32]kgo.Offset{}
	for p, o := range starts {
		parts[p] = kgo.NewOffset().At(o)
	}
	ready := newFetchReady(ctx, kadm.NewClient(admCl), l.Topic)
	isolation := kgo.ReadUncommitted()
	if l.Isolation == IsolationReadCommitted {
		isolation = kgo.ReadCommitted()
	}
	cons, err := l.kafkaClient("walpost-verify",
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{l.Topic: parts}),
		kgo.FetchMaxWait(100*time.Millisecond), kgo.WithHooks(ready), kgo.FetchIsolationLevel(isolation))
	if err != nil {
		return nil, nil, fmt.Errorf("kafka: %w", err)
	}
	return cons, ready, nil
}

// write runs the writers until l.Events events are committed and returns the first write error.
func (l *LeakTest) write(ctx context.Context, pool *pgxpool.Pool, insertSQL, prefix string, ws *writeState) error {
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	var claimed atomic.Int64
	var wg sync.WaitGroup
	var writeErr error
	var errOnce sync.Once
	payload := l.Payload()
	seed := mrand.Uint64()
	for w := 0; w < l.Writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := mrand.New(mrand.NewPCG(seed, uint64(w)))
			for t := 0; wctx.Err() == nil; t++ {
				n := int64(1 + rng.IntN(l.MaxTxnSize))
				first := claimed.Add(n) - n
				if first >= int64(l.Events) {
					return
				}
				n = min(n, int64(l.Events)-first)
				txn := fmt.Sprintf("w%d-t%d", w, t)
				if err := l.writeTxn(wctx, pool, insertSQL, prefix, txn, int(n), payload, ws); err != nil {
					if wctx.Err() == nil {
						errOnce.Do(func() { writeErr = err })
						wcancel()
					}
					return
				}
			}
		}(w)
	}
	wg.Wait()
	return writeErr
}

// awaitDelivery waits until written events arrived and settled, the timeout passed or ctx ended.
func (l *LeakTest) awaitDelivery(ctx context.Context, written int64, res *Result) {
	deadline := time.NewTimer(l.Timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if l.delivered.Load() >= written {
			// Everything arrived; keep reading a moment for duplicates.
			l.phase.Store("settling")
			select {
			case <-time.After(l.Settle):
			case <-ctx.Done():
			}
			return
		}
		select {
		case <-ctx.Done():
			res.Interrupted = true
			return
		case <-deadline.C:
			res.TimedOut = true
			return
		case <-tick.C:
		}
	}
}

// kafkaClient is a client of the seed brokers with client id id, then
// KafkaOpts, then opts.
func (l *LeakTest) kafkaClient(id string, opts ...kgo.Opt) (*kgo.Client, error) {
	all := append([]kgo.Opt{kgo.SeedBrokers(l.Brokers...), kgo.ClientID(id)}, l.KafkaOpts...)
	return kgo.NewClient(append(all, opts...)...)
}

// fetchReady is a kgo hook that closes ch once a fetch request has been
// written to the leader of every partition of the topic.
type fetchReady struct {
	mu   sync.Mutex
	want map[int32]bool // leader node ids without a fetch yet
	ch   chan struct{}
}

func newFetchReady(ctx context.Context, adm *kadm.Client, topic string) *fetchReady {
	h := &fetchReady{want: map[int32]bool{}, ch: make(chan struct{})}
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if md, err := adm.Metadata(mctx, topic); err == nil {
		for _, p := range md.Topics[topic].Partitions {
			if p.Leader >= 0 {
				h.want[p.Leader] = true
			}
		}
	}
	if len(h.want) == 0 {
		h.want[-1] = true // unknown leaders: the first fetch anywhere will do
	}
	return h
}

// OnBrokerWrite implements kgo.HookBrokerWrite.
func (h *fetchReady) OnBrokerWrite(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key != int16(kmsg.Fetch) || err != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.want) == 0 {
		return
	}
	delete(h.want, meta.NodeID)
	if h.want[-1] {
		clear(h.want)
	}
	if len(h.want) == 0 {
		close(h.ch)
	}
}

// endOffsets returns the end offset of every partition of topic. A topic
// just created may be unknown to the broker for a moment: an unknown topic
// is retried for a few seconds before it is reported missing.
func endOffsets(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		starts, err := tryEndOffsets(ctx, adm, topic)
		if err == nil || !errors.Is(err, kerr.UnknownTopicOrPartition) || time.Now().After(deadline) || ctx.Err() != nil {
			if errors.Is(err, kerr.UnknownTopicOrPartition) {
				return nil, fmt.Errorf("topic %q does not exist: start walpost run first (it creates the topic with kafka.create_topic_partitions) or create it", topic)
			}
			return starts, err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func tryEndOffsets(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, error) {
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(lctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %q: %w", topic, err)
	}
	starts := map[int32]int64{}
	var perr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Topic != topic {
			return
		}
		if o.Err != nil && perr == nil {
			perr = o.Err
		}
		starts[o.Partition] = o.Offset
	})
	if perr != nil {
		return nil, fmt.Errorf("end offsets of %q: %w", topic, perr)
	}
	if len(starts) == 0 {
		return nil, kerr.UnknownTopicOrPartition
	}
	return starts, nil
}

func resolveTable(ctx context.Context, pool *pgxpool.Pool, table string) (string, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return "", fmt.Errorf("postgres: %w", err)
	}
	defer conn.Release()
	t, err := replication.ResolveTable(ctx, conn.Conn(), table)
	if err != nil {
		return "", fmt.Errorf("postgres: %w", err)
	}
	return t.String(), nil
}

// writeTxn inserts n rows in one transaction, in row order, and records
// them with the client's clock right after COMMIT returned.
func (l *LeakTest) writeTxn(ctx context.Context, pool *pgxpool.Pool, insertSQL, prefix, txn string, n int, payload string, ws *writeState) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	b := &pgx.Batch{}
	exp := make([]Expected, n)
	for i := range exp {
		exp[i] = Expected{Key: prefix + txn + fmt.Sprintf("-r%d", i), Txn: txn, Index: i}
		b.Queue(insertSQL, exp[i].Key, payload)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	committed := time.Now()
	ws.mu.Lock()
	ws.expected = append(ws.expected, exp...)
	ws.commits[txn] = committed
	ws.txns++
	ws.mu.Unlock()
	l.written.Add(int64(n))
	return nil
}

// consume reads the topic until ctx ends, keeping the run's records in
// offset order per partition.
func (l *LeakTest) consume(ctx context.Context, cl *kgo.Client, prefix string, cs *consumeState) {
	for {
		fetches := cl.PollFetches(ctx)
		now := time.Now()
		fetches.EachError(func(_ string, _ int32, err error) {
			if cs.err == nil && !errors.Is(err, context.Canceled) && !errors.Is(err, kgo.ErrClientClosed) {
				cs.err = err
			}
		})
		fetches.EachRecord(func(r *kgo.Record) {
			key := string(r.Key)
			if !strings.HasPrefix(key, prefix) {
				return
			}
			o := Observed{Key: key, Partition: r.Partition, Offset: r.Offset}
			found := false
			for _, h := range r.Headers {
				if h.Key == "commit_lsn" {
					if lsn, err := pglogrepl.ParseLSN(string(h.Value)); err == nil {
						o.CommitLSN, found = lsn, true
					}
					break
				}
			}
			if !found {
				cs.noCommitLSN++
			}
			cs.observed = append(cs.observed, o)
			if _, ok := cs.firstSeen[key]; !ok {
				cs.firstSeen[key] = now
				l.delivered.Add(1)
			}
		})
		if ctx.Err() != nil {
			return
		}
	}
}

// cleanup deletes the run's rows unless KeepRows; the inserts are already
// in the WAL, so deleting them does not change what walpost forwards.
func (l *LeakTest) cleanup(pool *pgxpool.Pool, table string, expected []Expected, res *Result) {
	if l.KeepRows || len(expected) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	keys := make([]string, 0, 5000)
	for i := 0; i < len(expected); i += cap(keys) {
		keys = keys[:0]
		for _, e := range expected[i:min(i+cap(keys), len(expected))] {
			keys = append(keys, e.Key)
		}
		if _, err := pool.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE idempotency_key = ANY($1)`, table), keys); err != nil {
			res.CleanupError = fmt.Sprintf("could not delete the run's rows from %s (they have keys %s*): %v", table, l.Prefix(), err)
			return
		}
	}
}

// summarise fills res from what was written and consumed.
func (l *LeakTest) summarise(res *Result, ws *writeState, cs *consumeState, starts map[int32]int64) {
	expected := ws.expected
	rep := Validate(expected, cs.observed)
	res.Report = rep
	res.Written = len(expected)
	res.Transactions = ws.txns
	res.Delivered = rep.Delivered
	res.Lost = len(rep.Lost)
	res.LostKeys = rep.Lost[:min(len(rep.Lost), 100)]
	res.Duplicates = rep.Duplicates()
	res.DuplicatedKeys = len(rep.Duplicated)
	res.OutOfOrder = len(rep.OutOfOrder)
	res.Unexpected = rep.Unexpected
	res.NoCommitLSN = cs.noCommitLSN
	res.NothingArrived = len(cs.observed) == 0
	res.Partitions = PerPartition(expected, cs.observed, starts)
	res.Latency = CommitToConsume(expected, ws.commits, cs.firstSeen)
	res.Isolation, res.ExactlyOnce = l.Isolation, l.ExactlyOnce
	res.OK = rep.OK() && !res.Interrupted && res.Written == res.Events && !(l.ExactlyOnce && res.Duplicates > 0)
}

// Isolation levels of LeakTest.Isolation.
const (
	IsolationReadUncommitted = "read_uncommitted"
	IsolationReadCommitted   = "read_committed"
)
