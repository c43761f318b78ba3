package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/walpost/walpost/outbox"
)

// Config configures the producer.
type Config struct {
	// Brokers are the seed brokers (host:port). Required.
	Brokers []string
	// DefaultTopic receives events whose row has no topic. Required.
	DefaultTopic string
	// ClientID is the Kafka client.id. Default "walpost".
	ClientID string
	// Linger is the per-partition batch linger (Java linger.ms). Default 5ms.
	Linger time.Duration
	// Compression: none, gzip, snappy, lz4 or zstd. Default lz4.
	Compression string
	// MaxMessageBytes caps a record batch (ProducerBatchMaxBytes); a record
	// above it fails client-side without touching its neighbours. 0 leaves
	// franz-go's default (1 MB).
	MaxMessageBytes int
	// MaxBufferedRecords bounds records buffered in the client; set it
	// above the pipeline's in-flight limit so Produce never blocks.
	MaxBufferedRecords int
	// Logger receives the client's logs through kslog; nil discards them.
	Logger *slog.Logger
	// OnDataLoss is called (on a client goroutine) when franz-go detects
	// data loss on a partition (OUT_OF_ORDER_SEQUENCE_NUMBER or
	// UNKNOWN_PRODUCER_ID after acks). It must not block.
	OnDataLoss func(topic string, partition int32)
	// Opts are extra client options (TLS, SASL, tests).
	Opts []kgo.Opt
}

// Kafka is the producing side.
type Kafka struct {
	cfg    Config
	client *kgo.Client
	log    *slog.Logger
}

// New creates the client. It does not contact the brokers.
func New(cfg Config) (*Kafka, error) {
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
	codec, err := codec(cfg.Compression)
	if err != nil {
		return nil, err
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.WithLogger(kslog.New(cfg.Logger)),
		// Durability, explicitly (DESIGN §4): idempotent writes stay on
		// (no DisableIdempotentWrite), acks from all in-sync replicas,
		// unlimited retries, no delivery timeout, and no
		// AllowIdempotentProduceCancellation.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordRetries(math.MaxInt64),
		kgo.RecordDeliveryTimeout(0),
		kgo.UnknownTopicRetries(4),
		kgo.ProducerLinger(cfg.Linger),
		kgo.ProducerBatchCompression(codec),
		kgo.RecordPartitioner(partitioner{kgo.StickyKeyPartitioner(nil)}),
		kgo.ProducerOnDataLossDetected(func(topic string, partition int32) {
			cfg.Logger.Error("kafka reported data loss on a partition; events after the slot's confirmed position will be sent again",
				"topic", topic, "partition", partition)
			if cfg.OnDataLoss != nil {
				cfg.OnDataLoss(topic, partition)
			}
		}),
		// No AllowAutoTopicCreation: a missing topic is a destination
		// error to fix, never created implicitly.
	}
	if cfg.MaxMessageBytes > 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(int32(cfg.MaxMessageBytes)))
	}
	if cfg.MaxBufferedRecords > 0 {
		opts = append(opts, kgo.MaxBufferedRecords(cfg.MaxBufferedRecords))
	}
	opts = append(opts, cfg.Opts...)
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return &Kafka{cfg: cfg, client: client, log: cfg.Logger}, nil
}

func codec(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "", "lz4":
		return kgo.Lz4Compression(), nil
	case "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("sink: unknown compression %q", name)
}

// Client returns the underlying client (for admin commands and tests).
func (k *Kafka) Client() *kgo.Client { return k.client }

// produced travels in Record.Context: it carries the partition key to the
// partitioner and the callback to the promise, one allocation per record.
type produced struct {
	context.Context
	pk    string
	hasPK bool
	done  func(*kgo.Record, error)
}

// Produce sends ev asynchronously; done is called exactly once with the
// outcome (nil on ack). A record that cannot be built is reported to done
// at once. done must not block.
func (k *Kafka) Produce(ev *outbox.Event, done func(*kgo.Record, error)) {
	r, err := BuildRecord(ev, k.cfg.DefaultTopic)
	if err != nil {
		done(nil, err)
		return
	}
	k.ProduceRecord(r, ev.PartitionKey, ev.HasPartition, done)
}

// ProduceRecord sends a built record; partitionKey, when set, chooses the
// partition instead of the record key.
func (k *Kafka) ProduceRecord(r *kgo.Record, partitionKey string, hasPK bool, done func(*kgo.Record, error)) {
	r.Context = &produced{Context: context.Background(), pk: partitionKey, hasPK: hasPK, done: done}
	k.client.Produce(context.Background(), r, promise)
}

func promise(r *kgo.Record, err error) {
	p := r.Context.(*produced)
	p.done(r, err)
}

// Flush waits until every produced record has an outcome or ctx ends.
func (k *Kafka) Flush(ctx context.Context) error { return k.client.Flush(ctx) }

// Close closes the client; records without an outcome fail with
// kgo.ErrClientClosed.
func (k *Kafka) Close() { k.client.Close() }

// partitioner partitions by the row's partition_key when present and by
// the record key otherwise, both with Kafka's murmur2 (the Java client's
// default), so consumers and other producers agree on the partition.
type partitioner struct{ inner kgo.Partitioner }

func (p partitioner) ForTopic(t string) kgo.TopicPartitioner {
	return topicPartitioner{p.inner.ForTopic(t)}
}

type topicPartitioner struct{ inner kgo.TopicPartitioner }

func (t topicPartitioner) RequiresConsistency(*kgo.Record) bool { return true }

func (t topicPartitioner) Partition(r *kgo.Record, n int) int {
	if p, ok := r.Context.(*produced); ok && p.hasPK {
		return t.inner.Partition(&kgo.Record{Key: []byte(p.pk)}, n)
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
