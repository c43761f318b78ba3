package forwarder

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/sink/kafka"
)

// openKafka builds the Kafka sink of the configuration once the default
// topic is known to exist (or was created). Kafka unreachable at start is
// retried like PostgreSQL; only a missing topic (or one walpost may not
// describe) is fatal. It returns nil, nil when ctx ends first.
func (f *Forwarder) openKafka(ctx context.Context) (*kafka.Sink, error) {
	cfg := f.cfg
	b := newBackoff(30 * time.Second)
	for {
		err := f.checkTopic(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		if errors.Is(err, kafka.ErrTopicMissing) {
			return nil, err
		}
		f.m.setState(stateReconnecting)
		f.m.reconnects.WithLabelValues("kafka").Inc()
		wait := b.next(30 * time.Second)
		f.log.Warn("kafka not reachable; retrying", "brokers", strings.Join(cfg.Kafka.Brokers, ","), "err", redact.String(err.Error()), "retry_in", wait.String())
		if !sleep(ctx, wait) {
			return nil, nil
		}
	}
	kcfg, err := kafka.ConfigFrom(cfg)
	if err != nil {
		return nil, err
	}
	kcfg.ProducerOpts = []kgo.Opt{kgo.WithHooks(kprom.NewMetrics("walpost_kafka", kprom.Registerer(f.reg)))}
	kcfg.Logger = f.log.With("component", "kafka")
	return kafka.New(kcfg)
}

// topicGrace is how long a missing topic is looked for again at start.
const topicGrace = 2 * time.Second

// checkTopic checks that the default topic exists, creating it when
// kafka.create_topic_partitions asks for it.
func (f *Forwarder) checkTopic(ctx context.Context) error {
	cfg := f.cfg.Kafka
	// Metadata requests are answered from a cache younger than
	// MetadataMinAge (5 s by default): a topic that was missing a moment
	// ago would stay missing for that long.
	cl, err := kafka.NewClient(cfg, kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	_, err = kafka.DescribeTopic(cctx, cl, cfg.Topic)
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
		_, err = kafka.DescribeTopic(cctx, cl, cfg.Topic)
	}
	if err != nil {
		return fmt.Errorf("kafka.topic: %w (brokers %v)", err, cfg.Brokers)
	}
	return nil
}
