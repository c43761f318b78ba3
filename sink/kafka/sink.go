package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/sink"
)

// Config configures the producer.
type Config struct {
	// Brokers are the seed brokers (host:port). Required.
	Brokers []string
	// DefaultTopic receives events whose row has no topic. Required.
	DefaultTopic string
	// ClientID is the Kafka client.id. Default "walpost".
	ClientID string
	// Linger is the per-partition batch linger (Java linger.ms); 0 sends
	// as soon as possible.
	Linger time.Duration
	// Compression: none, gzip, snappy, lz4 or zstd. Default snappy.
	Compression string
	// MaxMessageBytes caps a record batch (ProducerBatchMaxBytes); a record
	// above it fails client-side without touching its neighbours. 0 leaves
	// franz-go's default (1 MB).
	MaxMessageBytes int
	// Partitioner names the hash that maps a partition key to a
	// partition (KeyPartitioner: PartitionerMurmur2, also "",
	// PartitionerConsistentRandom or PartitionerFNV1a).
	Partitioner string
	// RequestTimeout is franz-go's ProduceRequestTimeout (Java and
	// librdkafka request.timeout.ms); 0 leaves franz-go's default (10 s).
	RequestTimeout time.Duration
	// MaxBufferedRecords bounds records buffered in the client; set it
	// above the pipeline's in-flight limit so Produce never blocks.
	MaxBufferedRecords int
	// Logger receives the client's logs through kslog; nil discards them.
	Logger *slog.Logger
	// OnDataLoss is called (on a client goroutine) when franz-go detects
	// data loss on a partition (OUT_OF_ORDER_SEQUENCE_NUMBER or
	// UNKNOWN_PRODUCER_ID after acks); the client goes on producing with a
	// new producer ID and re-sends nothing itself: the caller decides what
	// to send again (the forwarder restarts its session from the slot).
	// It must not block.
	OnDataLoss func(topic string, partition int32)
	// Layout is the record format (NewLayout); nil is walpost's own
	// record.
	Layout *Layout
	// Schema frames each record value with its subject's registry schema
	// (NewSchema) after Layout built it; nil sends the value as built.
	Schema *Schema
	// KeySchema frames each record key (NewSchema with
	// SchemaOptions.Key); nil sends the key as built.
	KeySchema *Schema
	// TransactionalID makes the producer transactional (exactly-once
	// mode; TransactionalID builds it): records are produced inside the
	// transactions of BeginTxn/CommitTxn/AbortTxn. Empty: idempotent only.
	TransactionalID string
	// TransactionTimeout is franz-go's TransactionTimeout (Java
	// transaction.timeout.ms): the broker aborts a transaction left open
	// longer. At most the broker's transaction.max.timeout.ms (15 min by
	// default). 0 leaves franz-go's default (40 s).
	TransactionTimeout time.Duration
	// CheckpointTopic receives the checkpoint record of each committed
	// transaction (CommitTxn).
	CheckpointTopic string
	// Opts are extra client options (TLS, SASL, tests) for every client.
	Opts []kgo.Opt
	// ProducerOpts apply to the producing client only (e.g. metric hooks).
	ProducerOpts []kgo.Opt
	// RecordContext, when set, gives each record's Context: a context
	// derived from parent (which must stay reachable through it: the sink
	// finds its state there) for ev, e.g. one carrying the row's span
	// context for a tracing hook. Nil leaves Record.Context the sink's own,
	// at no cost.
	RecordContext func(parent context.Context, ev *outbox.Event) context.Context
}

// Sink produces outbox events to Kafka with an idempotent producer; it
// implements sink.Sink.
type Sink struct {
	cfg    Config
	client atomic.Pointer[kgo.Client] // replaced (idle) when a topic's limit was raised
	opts   []kgo.Opt                  // the producing client's options, to rebuild it
	admin  *kgo.Client                // topic descriptions for the size limits
	log    *slog.Logger
	limits sync.Map // topic → topicLimit, its max.message.bytes as last read
	built  sync.Map // topic → int, the smallest batch limit the client's partitions of topic were created with
	remake sync.Mutex

	// Records waiting for their topic's limit (hold.go).
	holdMu  sync.Mutex
	holds   map[string]*hold // topic → its held records, in order
	nholds  atomic.Int32     // len(holds), read without the lock
	holders sync.WaitGroup   // the goroutines that await a topic's limit
	quit    chan struct{}    // closed by Close
	closed  sync.Once

	// noDescribe: the coordinator cannot describe the transactional id
	// (awaitMarkers), so commits no longer wait for their markers;
	// describeFails counts the commits in a row whose wait failed.
	noDescribe    atomic.Bool
	describeFails atomic.Int32

	// staged: the checkpoint record StageCheckpoint produced into the
	// open transaction (nil: none). The transaction's calls (BeginTxn,
	// StageCheckpoint, CommitTxn, AbortTxn) come one at a time.
	staged *stagedCheckpoint

	lay   *Layout                       // cfg.Layout
	types atomic.Pointer[[2]ColumnType] // key and value column types (SetColumnTypes)

	// How old a read limit may be before it is read again: on any record
	// (limitRefresh), before a record is reported too large
	// (limitRecheck); a failed read is not repeated sooner than
	// limitRetry.
	limitRefresh, limitRecheck, limitRetry time.Duration
}

// Defaults of the Sink's limit intervals.
const (
	limitRefresh = time.Minute
	limitRecheck = time.Second
	limitRetry   = 5 * time.Second
)

// New creates the client. It does not contact the brokers.
func New(cfg Config) (*Sink, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("sink: no brokers")
	}
	if cfg.DefaultTopic == "" {
		return nil, errors.New("sink: no default topic")
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "walpost"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	compression, err := compressionOpt(cfg.Compression)
	if err != nil {
		return nil, err
	}
	keyed, err := KeyPartitioner(cfg.Partitioner)
	if err != nil {
		return nil, err
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.WithLogger(clientLogger{kslog.New(cfg.Logger)}),
		// Durability, explicitly (DESIGN.md, Kafka facts): idempotent writes stay on
		// (no DisableIdempotentWrite), acks from all in-sync replicas,
		// unlimited retries, no delivery timeout, and no
		// AllowIdempotentProduceCancellation.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordRetries(math.MaxInt64),
		kgo.RecordDeliveryTimeout(0),
		kgo.UnknownTopicRetries(4),
		kgo.ProducerLinger(cfg.Linger),
		compression,
		kgo.RecordPartitioner(partitioner{keyed}),
		kgo.ProducerOnDataLossDetected(func(topic string, partition int32) {
			cfg.Logger.Error("kafka reported data loss on a partition: records it had acknowledged may be gone",
				"topic", topic, "partition", partition, "handled", cfg.OnDataLoss != nil)
			if cfg.OnDataLoss != nil {
				cfg.OnDataLoss(topic, partition)
			}
		}),
		// No AllowAutoTopicCreation: a missing topic is a destination
		// error to fix, never created implicitly.
	}
	k := &Sink{cfg: cfg, log: cfg.Logger, quit: make(chan struct{}), limitRefresh: limitRefresh, limitRecheck: limitRecheck, limitRetry: limitRetry, lay: cfg.Layout}
	if k.lay != nil {
		k.types.Store(&[2]ColumnType{k.lay.KeyType, k.lay.ValueType})
	}
	// A batch never exceeds its topic's max.message.bytes, so the broker
	// never refuses a batch of small records for its size. franz-go asks
	// once per partition, when it first produces to it, and keeps the
	// answer: the limit is the one the size pre-check last read (it runs
	// before the record reaches the client), never a read on franz-go's
	// goroutine.
	opts = append(opts, kgo.ProducerBatchMaxBytesFn(func(topic string) int32 {
		if topic == "" {
			return int32(k.fallbackLimit())
		}
		return int32(k.batchLimit(topic))
	}))
	if cfg.RequestTimeout > 0 {
		opts = append(opts, kgo.ProduceRequestTimeout(cfg.RequestTimeout))
	}
	if cfg.MaxBufferedRecords > 0 {
		opts = append(opts, kgo.MaxBufferedRecords(cfg.MaxBufferedRecords))
	}
	if cfg.TransactionalID != "" {
		opts = append(opts, kgo.TransactionalID(cfg.TransactionalID))
		if cfg.TransactionTimeout > 0 {
			opts = append(opts, kgo.TransactionTimeout(cfg.TransactionTimeout))
		}
	}
	opts = append(opts, cfg.Opts...)
	opts = append(opts, cfg.ProducerOpts...)
	admin, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...), kgo.ClientID(cfg.ClientID + "-admin")}, cfg.Opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	client, err := kgo.NewClient(opts...)
	if err != nil {
		admin.Close()
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	k.client.Store(client)
	k.opts, k.admin = opts, admin
	return k, nil
}

// defaultMaxMessageBytes is Kafka's default max.message.bytes.
const defaultMaxMessageBytes = 1048588

func (k *Sink) fallbackLimit() int {
	if k.cfg.MaxMessageBytes > 0 {
		return k.cfg.MaxMessageBytes
	}
	return defaultMaxMessageBytes
}

// ErrLimitUnknown: the topic's max.message.bytes could not be read, so a
// record's size cannot be checked. Transient: the record waits in the sink
// until the limit is read (hold.go), or in exactly-once mode the session
// restarts and reads it again; never a reason to quarantine.
var ErrLimitUnknown = errors.New("cannot read the topic's max.message.bytes")

// ErrLimitRaised: the record fits its topic's max.message.bytes, which was
// raised after the client first produced to the topic, and the client
// still had records in flight, so it could not be rebuilt with the new
// limit. Record-level: the isolator re-sends it alone, when the client is
// idle and is rebuilt.
var ErrLimitRaised = errors.New("the topic's max.message.bytes was raised while records were in flight")

// topicLimit is a topic's max.message.bytes as last read (bytes 0: never
// read), and the last failed read since.
type topicLimit struct {
	bytes    int
	readAt   time.Time
	err      error
	failedAt time.Time
}

// limitFor returns the record size limit of topic: Config.MaxMessageBytes
// when set, else the topic's max.message.bytes, read again when the value
// is older than maxAge. A read that fails keeps the value read before,
// unless strict; with no value it is an ErrLimitUnknown error.
func (k *Sink) limitFor(topic string, now time.Time, maxAge time.Duration, strict bool) (int, error) {
	if k.cfg.MaxMessageBytes > 0 {
		return k.cfg.MaxMessageBytes, nil
	}
	var l topicLimit
	if v, ok := k.limits.Load(topic); ok {
		l = v.(topicLimit)
	}
	if l.bytes > 0 && now.Sub(l.readAt) < maxAge {
		return l.bytes, nil
	}
	if l.err == nil || now.Sub(l.failedAt) >= k.limitRetry {
		k.remake.Lock()
		l = k.readLimit(topic, now)
		k.remake.Unlock()
	}
	if l.bytes == 0 || (strict && l.err != nil) {
		return 0, l.err
	}
	return l.bytes, nil
}

// readLimit describes topic and caches the outcome; k.remake is held, so
// one read is made for many records that need it at once.
func (k *Sink) readLimit(topic string, now time.Time) topicLimit {
	var l topicLimit
	if v, ok := k.limits.Load(topic); ok {
		l = v.(topicLimit)
		if (l.bytes > 0 && !l.readAt.Before(now)) || (l.err != nil && !l.failedAt.Before(now)) {
			return l // read by another caller meanwhile
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := DescribeTopic(ctx, k.admin, topic)
	if err == nil && info.MaxMessageBytes <= 0 {
		err = errors.New("the broker did not return it")
	}
	switch {
	case errors.Is(err, ErrTopicMissing):
		// As the broker would answer the record: a destination failure
		// naming the fix, never quarantined.
		l.err, l.failedAt = fmt.Errorf("%w: %w", kerr.UnknownTopicOrPartition, err), time.Now()
	case refusesDescribe(err):
		l.err, l.failedAt = fmt.Errorf("%w of topic %q: %w: fix: grant walpost's principal DESCRIBE_CONFIGS on the topic, or set kafka.max_message_bytes", ErrLimitUnknown, topic, err), time.Now()
	case err != nil:
		k.log.Warn("cannot read the topic's max.message.bytes; records that need it wait in the sink until it is read (exactly-once: the session restarts)",
			"topic", topic, "err", err.Error(), "retry_in", k.limitRetry.String())
		l.err, l.failedAt = fmt.Errorf("%w of topic %q (read again in a moment): %w", ErrLimitUnknown, topic, err), time.Now()
	default:
		if l.bytes > 0 && l.bytes != info.MaxMessageBytes {
			k.log.Info("the topic's max.message.bytes changed", "topic", topic, "from", l.bytes, "to", info.MaxMessageBytes)
		}
		l = topicLimit{bytes: info.MaxMessageBytes, readAt: time.Now()}
	}
	k.limits.Store(topic, l)
	return l
}

// batchLimit is the batch limit franz-go gets for a new partition of
// topic: the limit last read (the pre-check has read it before the first
// record of the topic reaches the client), else the fallback. The
// smallest answer per topic is kept, to know when the client must be
// rebuilt to send a record that fits a raised limit.
func (k *Sink) batchLimit(topic string) int {
	limit := k.fallbackLimit()
	if k.cfg.MaxMessageBytes == 0 {
		if v, ok := k.limits.Load(topic); ok && v.(topicLimit).bytes > 0 {
			limit = v.(topicLimit).bytes
		}
	}
	for {
		v, loaded := k.built.LoadOrStore(topic, limit)
		if !loaded || v.(int) <= limit || k.built.CompareAndSwap(topic, v, limit) {
			return limit
		}
	}
}

// rebuild replaces the producing client, so its partitions take the
// limits last read; only when it has no record in flight (order and
// idempotence belong to one client). The old client is closed first: its
// hooks (the Kafka metrics) unregister before the new client's register.
func (k *Sink) rebuild(topic string, limit int) error {
	k.remake.Lock()
	defer k.remake.Unlock()
	if v, ok := k.built.Load(topic); !ok || v.(int) >= limit {
		return nil // rebuilt meanwhile
	}
	if k.cfg.TransactionalID != "" {
		// A new client would fence this one and abort the open
		// transaction: the session restarts with a new producer, which
		// reads the limits again.
		return fmt.Errorf("%w of topic %q was raised: the session restarts with a new transactional producer", ErrLimitUnknown, topic)
	}
	old := k.client.Load()
	if n := old.BufferedProduceRecords(); n > 0 {
		return fmt.Errorf("%w (%d in flight): it is sent again alone", ErrLimitRaised, n)
	}
	old.Close()
	k.built.Clear()
	cl, err := kgo.NewClient(k.opts...)
	if err != nil {
		// The options built a client before; keep the closed one so
		// every record fails as transient and the session restarts.
		return fmt.Errorf("rebuild the kafka client: %w", err)
	}
	k.client.Store(cl)
	k.log.Info("rebuilt the kafka producer to use the topic's raised max.message.bytes", "topic", topic, "max_message_bytes", limit)
	return nil
}

// RecordSize estimates the bytes a record takes in a record batch (v2)
// of its own: batch header, record framing, key, value and headers,
// uncompressed, as the Java client's max.request.size check counts it.
func RecordSize(r *kgo.Record) int {
	n := 61 + 21 + len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += 10 + len(h.Key) + len(h.Value)
	}
	return n
}

func codec(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "", "snappy":
		return kgo.SnappyCompression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("sink: unknown compression %q", name)
}

// Client returns the underlying client (for admin commands and tests); it
// is replaced when a topic's raised limit needs a new one.
func (k *Sink) Client() *kgo.Client { return k.client.Load() }

// produced travels in Record.Context: it carries the partition key to the
// partitioner and the outcome's receiver to the promise, and holds the
// record and its headers, so an event costs no allocation of the sink's:
// produced values are pooled and reused once their promise has returned.
// franz-go does not touch a record once its promise has returned, except
// that a goroutine waiting for an unknown topic may still call Done on the
// context of the first record it was started for: the embedded Context is
// therefore set once and never written again.
type produced struct {
	context.Context
	pk    string
	hasPK bool
	done  sink.Acker
	rec   kgo.Record
	hdrs  [5]kgo.RecordHeader // the contract's headers; a row's own headers may add more
}

var produceds = sync.Pool{New: func() any { return &produced{Context: context.Background()} }}

// producedKey finds the produced in a context derived from it
// (Config.RecordContext, and the per-record spans of a tracing hook that
// replaces Record.Context with a child).
type producedKey struct{}

// producedOf is the produced r travels with: Record.Context itself, or
// the one a context derived from it holds.
func producedOf(r *kgo.Record) (*produced, bool) {
	if p, ok := r.Context.(*produced); ok {
		return p, true
	}
	if r.Context == nil {
		return nil, false
	}
	p, ok := r.Context.Value(producedKey{}).(*produced)
	return p, ok
}

// release drops p's references to its event and returns it to the pool.
func (p *produced) release() {
	p.pk, p.hasPK, p.done = "", false, nil
	p.rec = kgo.Record{}
	p.hdrs = [len(p.hdrs)]kgo.RecordHeader{}
	produceds.Put(p)
}

var _ sink.Sink = (*Sink)(nil)

// Produce sends ev asynchronously; a.Acked is called exactly once with the
// outcome (nil on ack), an error being a *sink.Error. A record that cannot
// be built, or that is larger than its topic allows, is reported to a at
// once, on the calling goroutine, without touching its neighbours.
func (k *Sink) Produce(ev *outbox.Event, a sink.Acker) {
	p := produceds.Get().(*produced)
	r := &p.rec
	if err := k.build(r, p.hdrs[:0], ev); err != nil {
		p.release()
		a.Acked(sink.Result{Topic: k.lay.topic(ev, k.cfg.DefaultTopic), Partition: -1, Offset: -1}, classified(err, ""))
		return
	}
	now := ev.ReceivedAt // a clock read the stream made anyway
	if now.IsZero() {
		now = time.Now()
	}
	// The Debezium layout partitions by the key bytes (its PartitionKey
	// is the key column, already in r.Key in the key format's encoding).
	p.pk, p.hasPK, p.done = ev.PartitionKey, ev.HasPartition && (k.lay == nil || !k.lay.Debezium), a
	r.Context = p
	if k.cfg.RecordContext != nil {
		r.Context = k.cfg.RecordContext(context.WithValue(p, producedKey{}, p), ev)
	}
	if k.nholds.Load() > 0 && k.heldBehind(p) {
		return // its topic's records wait for the topic's limit (hold.go)
	}
	if err := k.checkSize(r, now); err != nil {
		if k.holdable(err) {
			k.startHold(p, err)
			return
		}
		k.fail(p, err)
		return
	}
	k.client.Load().Produce(context.Background(), r, promise)
}

// build fills r with ev's record in the sink's layout.
func (k *Sink) build(r *kgo.Record, hs []kgo.RecordHeader, ev *outbox.Event) error {
	var err error
	if k.lay == nil {
		if err = buildInto(r, hs, ev, k.cfg.DefaultTopic, false); err == nil {
			err = binaryValue(r, k.types.Load())
		}
	} else {
		err = k.lay.build(r, hs, ev, k.cfg.DefaultTopic, k.types.Load())
	}
	if err != nil {
		return err
	}
	if k.cfg.Schema != nil && r.Value != nil { // a tombstone stays a tombstone
		if r.Value, err = k.cfg.Schema.Frame(r.Topic, ev.EventType, r.Headers, r.Value); err != nil {
			return err
		}
	}
	if k.cfg.KeySchema != nil && r.Key != nil {
		r.Key, err = k.cfg.KeySchema.Frame(r.Topic, ev.EventType, nil, r.Key)
	}
	return err
}

// The Kafka sink is sink.ColumnTyped.
var _ sink.ColumnTyped = (*Sink)(nil)

// SetColumnTypes sets the key and payload columns' types (MappingTypes
// of the table's columns): the json formats' schemas, a bytea payload;
// Produce calls that follow use them.
func (k *Sink) SetColumnTypes(key, value ColumnType) {
	k.types.Store(&[2]ColumnType{key, value})
}

// CheckSize is the size pre-check: a record larger than its topic's limit
// fails with ErrRecordTooLarge before it is sent. The limit is read again
// when older than a minute, and before a record is reported too large
// (at most once a second per topic); a limit that cannot be read is an
// ErrLimitUnknown error (transient), never a reason to quarantine.
func (k *Sink) CheckSize(r *kgo.Record) error { return k.checkSize(r, time.Now()) }

func (k *Sink) checkSize(r *kgo.Record, now time.Time) error {
	size := RecordSize(r)
	limit, err := k.limitFor(r.Topic, now, k.limitRefresh, false)
	if err == nil && size > limit {
		limit, err = k.limitFor(r.Topic, time.Now(), k.limitRecheck, true)
	}
	switch {
	case err != nil:
		return err
	case size > limit:
		return fmt.Errorf("%w (record of about %d bytes, topic %q allows %d)", ErrRecordTooLarge, size, r.Topic, limit)
	}
	// franz-go refuses a record larger than the batch limit the
	// partition was created with: a raised limit needs a new client.
	if v, ok := k.built.Load(r.Topic); ok && v.(int) < size {
		return k.rebuild(r.Topic, limit)
	}
	return nil
}

// promise hands the outcome to the event's Acker and releases its state.
func promise(r *kgo.Record, err error) {
	p, _ := producedOf(r)
	a := p.done
	res := sink.Result{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
	if err != nil {
		err = classified(err, r.Topic)
	}
	p.release()
	a.Acked(res, err)
}

// classified wraps a produce failure in a *sink.Error of its kind and
// class; a destination failure also says what to do about it.
func classified(err error, topic string) error {
	kind, class := Classify(err)
	if kind == sink.Destination {
		err = Explain(err, topic)
	}
	return &sink.Error{Kind: kind, Class: class, Err: err}
}

// Flush waits until every produced record has an outcome (held records
// too: they are sent once their topic's limit is read) or ctx ends.
func (k *Sink) Flush(ctx context.Context) error {
	if err := k.waitHeld(ctx); err != nil {
		return err
	}
	return k.client.Load().Flush(ctx)
}

// Close closes the client; records without an outcome, held ones too,
// fail with kgo.ErrClientClosed.
func (k *Sink) Close() {
	k.closed.Do(func() { close(k.quit) })
	k.holders.Wait()
	k.remake.Lock()
	defer k.remake.Unlock()
	k.client.Load().Close()
	k.admin.Close()
}

// partitioner partitions by the row's partition_key when present and by
// the record key otherwise, both with the hash of kafka.partitioner
// (KeyPartitioner), so other producers of the topic that use the same
// hash put a key on the same partition.
type partitioner struct{ inner kgo.Partitioner }

func (p partitioner) ForTopic(t string) kgo.TopicPartitioner {
	return &topicPartitioner{inner: p.inner.ForTopic(t)}
}

// topicPartitioner partitions one topic. franz-go partitions one record
// of a topic at a time (kgo.Partitioner.ForTopic), so the record that
// carries a partition key to the hash is reused, its key a view of the
// event's string (hashes only read it).
type topicPartitioner struct {
	inner kgo.TopicPartitioner
	byKey kgo.Record
}

func (t *topicPartitioner) RequiresConsistency(*kgo.Record) bool { return true }

func (t *topicPartitioner) Partition(r *kgo.Record, n int) int {
	if p, ok := producedOf(r); ok && p.hasPK {
		t.byKey.Key = view(p.pk)
		i := t.inner.Partition(&t.byKey, n)
		t.byKey.Key = nil // keeps no event's bytes reachable
		return i
	}
	return t.inner.Partition(r, n)
}

// TopicInfo describes a topic.
type TopicInfo struct {
	Name            string
	Partitions      int
	MaxMessageBytes int
}

// ErrTopicMissing: the topic does not exist.
var ErrTopicMissing = errors.New("topic does not exist")

// DescribeTopic reads the topic's partition count and max.message.bytes.
func DescribeTopic(ctx context.Context, client *kgo.Client, topic string) (TopicInfo, error) {
	adm := kadm.NewClient(client)
	info := TopicInfo{Name: topic}
	tds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return info, fmt.Errorf("list topic %q: %w", topic, err)
	}
	td, ok := tds[topic]
	if !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		return info, fmt.Errorf("%w: %q: fix: create it (kafka-topics.sh --create --topic %s --partitions N), set kafka.create_topic_partitions so walpost creates it, or set kafka.topic", ErrTopicMissing, topic, topic)
	}
	if td.Err != nil {
		return info, fmt.Errorf("describe topic %q: %w", topic, td.Err)
	}
	info.Partitions = len(td.Partitions)
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return info, fmt.Errorf("describe config of topic %q: %w", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err == nil && rc.Err == nil {
		for _, c := range rc.Configs {
			if c.Key == "max.message.bytes" && c.Value != nil {
				info.MaxMessageBytes, _ = strconv.Atoi(*c.Value)
			}
		}
	}
	return info, nil
}

// CreateTopic creates topic with the given partitions and the broker's
// default replication factor; an existing topic is not an error.
func CreateTopic(ctx context.Context, client *kgo.Client, topic string, partitions int32) error {
	resp, err := kadm.NewClient(client).CreateTopic(ctx, partitions, -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create topic %q: %w", topic, err)
	}
	return nil
}
