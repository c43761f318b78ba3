package forwarder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
	"go.opentelemetry.io/otel/trace"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/kafkaconf"
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/sink/kafka"
)

// openKafka builds the Kafka sink of the configuration once the default
// topic is known to exist (or was created). Kafka unreachable at start is
// retried like PostgreSQL; only a missing topic (or one walpost may not
// describe) is fatal. It returns nil, nil when ctx ends first.
func (f *Forwarder) openKafka(ctx context.Context) (*kafka.Sink, error) {
	if ok, err := f.waitKafka(ctx); !ok || err != nil {
		return nil, err
	}
	kcfg, err := kafkaconf.ConfigFrom(f.cfg)
	if err != nil {
		return nil, err
	}
	f.hooks().apply(&kcfg)
	k, err := kafka.New(kcfg)
	if err != nil {
		return nil, err
	}
	// Records waiting for their topic's max.message.bytes (Kafka did not
	// answer the describe): they count against the in-flight limit, and
	// /readyz turns red when they hold the confirmed LSN for longer than
	// http.ready_stall_timeout.
	_ = f.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "walpost_kafka_held_records",
		Help: "Records waiting in the sink until their topic's max.message.bytes can be read (Kafka unreachable at the topic's first record); sent in order once it is."},
		func() float64 { return float64(k.Held()) }))
	return k, nil
}

// kafkaHooks instrument a producer's configuration: walpost's metrics
// and logger, the data-loss callback and the trace context.
type kafkaHooks struct {
	cfg        *config.Config
	log        *slog.Logger
	m          *metrics
	reg        prometheus.Registerer
	tp         trace.TracerProvider // nil without otel.enabled
	onDataLoss func(topic string, partition int32)
}

func (f *Forwarder) hooks() kafkaHooks {
	return kafkaHooks{cfg: f.cfg, log: f.log, m: f.m, reg: f.reg, tp: f.tp, onDataLoss: f.onDataLoss}
}

// apply adds the hooks to kcfg.
func (k kafkaHooks) apply(kcfg *kafka.Config) {
	kcfg.ProducerOpts = []kgo.Opt{kgo.WithHooks(kprom.NewMetrics("walpost_kafka", kprom.Registerer(k.reg)))}
	kcfg.Logger = k.log.With("component", "kafka")
	kcfg.OnDataLoss = k.onDataLoss
	k.watchTrace(kcfg.Layout)
	if k.tp != nil {
		k.traceProducer(kcfg)
	}
}

// watchTrace has l count and log each event whose tracing column holds
// a malformed trace context (the record goes without it).
func (k kafkaHooks) watchTrace(l *kafka.Layout) {
	if l == nil || !l.Tracing {
		return
	}
	l.OnInvalidTrace = func(ev *outbox.Event, err error) {
		k.m.traceInvalid.Inc()
		k.log.Warn("the tracing column holds a malformed trace context; the record is produced without it",
			"column", k.cfg.Mapping.TracingColumn, "id", ev.ID, "lsn", ev.CommitLSN.String(), "xid", ev.XID, "err", err)
	}
}

// waitKafka waits until the default topic (and in exactly-once mode the
// checkpoint topic) exists or was created: ok is false when ctx ended
// first; a missing or wrong topic is an error.
func (f *Forwarder) waitKafka(ctx context.Context) (ok bool, err error) {
	cfg := f.cfg
	b := newBackoff(30 * time.Second)
	for {
		err := f.checkTopic(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return false, nil
		}
		if errors.Is(err, kafka.ErrTopicMissing) || errors.Is(err, kafka.ErrCheckpointTopic) {
			return false, err
		}
		f.m.setState(stateReconnecting)
		f.m.reconnects.WithLabelValues("kafka").Inc()
		wait := b.next(30 * time.Second)
		f.log.Warn("kafka not reachable; retrying", "brokers", strings.Join(cfg.Kafka.Brokers, ","), "err", redact.String(err.Error()), "retry_in", wait.String())
		if !sleep(ctx, wait) {
			return false, nil
		}
	}
	return true, nil
}

// errDataLoss: Kafka reported data loss on a partition. The session ends
// and the next one produces everything after the slot's confirmed
// position again.
var errDataLoss = errors.New("kafka reported data loss")

// onDataLoss is the Kafka sink's OnDataLoss (on a client goroutine): the
// loss is counted and logged, and the running session ends with
// errDataLoss. Between sessions there is nothing to end: the next session
// starts from the slot anyway. The session's tracker is held where it
// stands (INV-1): acks that arrive after the report confirm nothing more,
// so neither the slot nor walpost's remembered position (INV-13) moves
// past a transaction whose records Kafka lost, and the next session
// produces it again.
func (f *Forwarder) onDataLoss(topic string, partition int32) {
	if t := f.m.tracker.Load(); t != nil {
		t.Hold(t.Confirmed())
	}
	f.m.dataLoss.WithLabelValues(topic, strconv.Itoa(int(partition))).Inc()
	f.log.Error("kafka reported data loss on a partition; the session restarts and every event after the slot's confirmed position is produced again (events confirmed before cannot be: check the topic with walpost verify)",
		"topic", topic, "partition", partition)
	if ch := f.lost.Load(); ch != nil {
		select {
		case *ch <- fmt.Errorf("%w on topic %q partition %d", errDataLoss, topic, partition):
		default: // the session is ending already
		}
	}
}

// watchDataLoss registers a session for onDataLoss: wait returns the
// errDataLoss reported while it is registered, or nil when ctx ends; stop
// unregisters it.
func (s *session) watchDataLoss() (wait func(context.Context) error, stop func()) {
	lost := make(chan error, 1)
	s.lost.Store(&lost)
	wait = func(ctx context.Context) error {
		select {
		case err := <-lost:
			return err
		case <-ctx.Done():
			return nil
		}
	}
	return wait, func() { s.lost.CompareAndSwap(&lost, nil) }
}

// topicGrace is how long a missing topic is looked for again at start:
// a busy broker's metadata has been seen to list a topic more than 2 s
// after CreateTopics returned.
const topicGrace = 10 * time.Second

// checkTopic checks that the default topic exists, creating it when
// kafka.create_topic_partitions asks for it.
func (f *Forwarder) checkTopic(ctx context.Context) error {
	cfg := f.cfg.Kafka
	// Metadata requests are answered from a cache younger than
	// MetadataMinAge (5 s by default): a topic that was missing a moment
	// ago would stay missing for that long.
	cl, err := kafkaconf.NewClient(cfg, kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	info, err := kafka.DescribeTopic(cctx, cl, cfg.Topic)
	grace := topicGrace
	if errors.Is(err, kafka.ErrTopicMissing) && cfg.CreateTopicPartitions > 0 {
		if err := kafka.CreateTopic(cctx, cl, cfg.Topic, int32(cfg.CreateTopicPartitions)); err != nil {
			return fmt.Errorf("kafka.create_topic_partitions: %w", err)
		}
		f.log.Info("created topic", "topic", cfg.Topic, "partitions", cfg.CreateTopicPartitions)
		grace = 15 * time.Second // bounded by cctx
	}
	// A topic created a moment ago (by walpost, or just before it started)
	// may not be in the broker's metadata yet: look again before calling
	// it missing.
	for until := time.Now().Add(grace); errors.Is(err, kafka.ErrTopicMissing) && time.Now().Before(until); {
		if !sleep(cctx, 100*time.Millisecond) {
			break
		}
		info, err = kafka.DescribeTopic(cctx, cl, cfg.Topic)
	}
	if err != nil {
		var ke *kerr.Error
		if errors.Is(err, kafka.ErrTopicMissing) || errors.As(err, &ke) {
			// A broker answered: the topic is missing or refused.
			return fmt.Errorf("kafka.topic: %w (brokers %v)", err, cfg.Brokers)
		}
		// No broker answered: blame the address, not the topic.
		return fmt.Errorf("kafka.brokers: no broker of %v answered (%w); fix: check kafka.brokers (WALPOST_KAFKA_BROKERS), that Kafka runs and that this host reaches it", cfg.Brokers, err)
	}
	f.m.initTopic(cfg.Topic, info.Partitions)
	if eos(f.cfg) {
		return f.checkCheckpointTopic(cctx, cl)
	}
	return nil
}
