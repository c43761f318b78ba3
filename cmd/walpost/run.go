package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/poison"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

func newRunCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "run",
		Short: "Forward outbox inserts from the replication slot to Kafka (foreground)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfigFor(cmd, config.NeedAll)
			if err != nil {
				return err
			}
			logger := newLogger(os.Stderr, cfg.Log)
			applyMemoryLimit(cfg, logger)
			applyProcs(logger)
			reg := newRegistry()
			f := &forwarder{cfg: cfg, log: logger, reg: reg, m: newMetrics(reg)}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			httpDone := make(chan error, 1)
			if cfg.HTTP.Listen != "" {
				go func() { httpDone <- serveHTTP(ctx, cfg, reg, f.m, logger) }()
			} else {
				httpDone <- nil
			}
			err = f.run(ctx)
			f.m.setState(stateStopped)
			cancel()
			if herr := <-httpDone; herr != nil && err == nil {
				err = herr
			}
			if err != nil {
				logger.Error("walpost stopped", "err", redact.String(err.Error()))
				return &exitError{code: 1, err: err}
			}
			return nil
		},
	}
}

// forwarder composes the replication stream, the checkpoint tracker and the
// Kafka sink, and restarts sessions after recoverable failures.
type forwarder struct {
	cfg   *config.Config
	log   *slog.Logger
	reg   *prometheus.Registry
	m     *metrics
	sink  *sink.Kafka
	store *poison.Store
	pool  *pgxpool.Pool
}

func (f *forwarder) run(ctx context.Context) error {
	cfg := f.cfg
	// Kafka unreachable at start is retried like PostgreSQL: only a
	// missing topic (or one walpost may not describe) is fatal.
	for backoff := time.Second; ; backoff = min(backoff*2, 30*time.Second) {
		err := f.checkTopic(ctx)
		if err == nil {
			break
		}
		if errors.Is(err, sink.ErrTopicMissing) || ctx.Err() != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		f.m.setState(stateReconnecting)
		f.m.reconnects.WithLabelValues("kafka").Inc()
		wait := backoff/2 + rand.N(backoff/2+1)
		f.log.Warn("kafka not reachable; retrying", "brokers", strings.Join(cfg.Kafka.Brokers, ","), "err", redact.String(err.Error()), "retry_in", wait.String())
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil
		}
	}
	kopts, err := kafka.ClientOpts(cfg.Kafka)
	if err != nil {
		return err
	}
	k, err := sink.New(sink.Config{
		Opts:               kopts,
		ProducerOpts:       []kgo.Opt{kgo.WithHooks(kprom.NewMetrics("walpost_kafka", kprom.Registerer(f.reg)))},
		Brokers:            cfg.Kafka.Brokers,
		DefaultTopic:       cfg.Kafka.Topic,
		ClientID:           cfg.Kafka.ClientID,
		Linger:             cfg.Kafka.Linger,
		Compression:        cfg.Kafka.Compression,
		MaxMessageBytes:    cfg.Kafka.MaxMessageBytes,
		MaxBufferedRecords: cfg.Pipeline.MaxInFlightEvents + 1024,
		Logger:             f.log.With("component", "kafka"),
	})
	if err != nil {
		return err
	}
	f.sink = k
	defer k.Close()
	// The poison table is written over its own pool, never over the
	// replication connection.
	pool, err := pgxpool.New(ctx, cfg.Postgres.URL)
	if err != nil {
		return fmt.Errorf("postgres.url: %w", err)
	}
	defer pool.Close()
	f.store = poison.NewStore(pool, cfg.Postgres.PoisonTable)
	f.pool = pool
	bg, stopBG := context.WithCancel(context.Background())
	var bgWG sync.WaitGroup
	defer func() { stopBG(); bgWG.Wait() }()
	bgWG.Add(1)
	go func() { defer bgWG.Done(); f.m.monitorSlot(bg, pool, cfg.Postgres.Slot, 5*time.Second, f.log) }()
	if every := cfg.Postgres.HeartbeatInterval; every > 0 {
		bgWG.Add(1)
		go func() { defer bgWG.Done(); f.heartbeat(bg, every) }()
	}

	backoff := time.Second
	for {
		started := time.Now()
		err := f.session(ctx)
		if ctx.Err() != nil {
			// Shutdown: the stream drained and confirmed; flush the rest.
			fctx, cancel := context.WithTimeout(context.Background(), cfg.Kafka.FlushTimeout)
			_ = k.Flush(fctx)
			cancel()
			return nil
		}
		if err == nil {
			continue
		}
		if replication.IsTerminal(err) || errors.Is(err, poison.ErrBreaker) {
			return err
		}
		f.m.reconnects.WithLabelValues(reconnectCause(err)).Inc()
		if time.Since(started) > time.Minute {
			backoff = time.Second
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		switch {
		case errors.As(err, new(*poison.DestinationError)):
			f.m.setState(stateReconnecting)
			f.log.Error("forwarding stopped: fix the destination; walpost retries and resumes from the slot", "slot", cfg.Postgres.Slot, "err", redact.String(err.Error()), "retry_in", wait.String())
			backoff = min(backoff*2, 30*time.Second)
		case errors.Is(err, replication.ErrSlotActive):
			f.m.setState(stateWaitingForSlot)
			f.log.Info("slot is held by another process; standing by", "slot", cfg.Postgres.Slot, "err", redact.String(err.Error()), "retry_in", wait.String())
			backoff = min(backoff*2, 5*time.Second)
		default:
			f.m.setState(stateReconnecting)
			f.log.Warn("session failed; reconnecting", "slot", cfg.Postgres.Slot, "err", redact.String(err.Error()), "retry_in", wait.String())
			backoff = min(backoff*2, 30*time.Second)
		}
		// Records of the failed session stay in the client and keep their
		// per-partition order; wait for their outcomes before resuming from
		// the slot, so the next session starts with nothing in flight.
		if err := k.Flush(ctx); err != nil {
			return nil
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil
		}
	}
}

// topicGrace is how long a missing topic is looked for again at start.
const topicGrace = 2 * time.Second

// checkTopic checks that the default topic exists, creating it when
// kafka.create_topic_partitions asks for it.
func (f *forwarder) checkTopic(ctx context.Context) error {
	// Metadata requests are answered from a cache younger than
	// MetadataMinAge (5 s by default): a topic that was missing a moment
	// ago would stay missing for that long.
	cl, err := kafka.NewClient(f.cfg.Kafka, kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	_, err = sink.DescribeTopic(cctx, cl, f.cfg.Kafka.Topic)
	grace := topicGrace
	if errors.Is(err, sink.ErrTopicMissing) && f.cfg.Kafka.CreateTopicPartitions > 0 {
		if err := sink.CreateTopic(cctx, cl, f.cfg.Kafka.Topic, int32(f.cfg.Kafka.CreateTopicPartitions)); err != nil {
			return fmt.Errorf("kafka.create_topic_partitions: %w", err)
		}
		f.log.Info("created topic", "topic", f.cfg.Kafka.Topic, "partitions", f.cfg.Kafka.CreateTopicPartitions)
		grace = 15 * time.Second // bounded by cctx
	}
	// A topic created a moment ago (by walpost, or just before it started)
	// may not be in the broker's metadata yet: look again before calling
	// it missing.
	for until := time.Now().Add(grace); errors.Is(err, sink.ErrTopicMissing) && time.Now().Before(until) && cctx.Err() == nil; {
		time.Sleep(100 * time.Millisecond)
		_, err = sink.DescribeTopic(cctx, cl, f.cfg.Kafka.Topic)
	}
	if err != nil {
		return fmt.Errorf("kafka.topic: %w (brokers %v)", err, f.cfg.Kafka.Brokers)
	}
	return nil
}

// session runs one replication connection until it fails or ctx ends.
func (f *forwarder) session(ctx context.Context) error {
	cfg := f.cfg
	rcfg := replication.Config{
		ConnString:     cfg.Postgres.URL,
		Slot:           cfg.Postgres.Slot,
		Publication:    cfg.Postgres.Publication,
		Table:          cfg.Postgres.Table,
		StatusInterval: cfg.Postgres.StatusInterval,
		ReceiveTimeout: cfg.Postgres.ReceiveTimeout,
		DrainTimeout:   cfg.Kafka.FlushTimeout,
		Logger:         f.log,
	}
	side, err := pgx.Connect(ctx, cfg.Postgres.URL)
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", replication.Explain(err, cfg.Postgres.Slot, cfg.Postgres.Publication))
	}
	defer side.Close(context.Background())
	table, slot, err := replication.Prepare(ctx, side, rcfg)
	if err != nil {
		return err
	}
	if slot.Active {
		return fmt.Errorf("%w: slot %q is streaming to PostgreSQL backend pid %d", replication.ErrSlotActive, cfg.Postgres.Slot, slot.ActivePID)
	}
	conn, err := replication.ConnectReplication(ctx, cfg.Postgres.URL)
	if err != nil {
		return fmt.Errorf("replication connection: %w", replication.Explain(err, cfg.Postgres.Slot, cfg.Postgres.Publication))
	}
	defer conn.Close(context.Background())

	tracker := checkpoint.New(slot.ConfirmedFlush, checkpoint.Limits{
		MaxEvents: cfg.Pipeline.MaxInFlightEvents,
		MaxBytes:  cfg.Pipeline.MaxInFlightBytes,
	})
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	iso := poison.NewIsolator(poison.Config{
		MaxAttempts:      cfg.Poison.MaxAttempts,
		Backoff:          cfg.Poison.Backoff,
		MaxRate:          cfg.Poison.MaxRate,
		RateWindow:       cfg.Poison.RateWindow,
		DefaultTopic:     cfg.Kafka.Topic,
		Logger:           f.log,
		OnPoisoned:       f.m.onPoisoned,
		OnOrderViolation: f.m.onOrderViolation,
		OnAck:            f.m.onAck(cfg.Kafka.Topic),
	}, f.sink, f.store, tracker)
	f.m.tracker.Store(tracker)
	isoDone := make(chan error, 1)
	go func() {
		err := iso.Run(sctx)
		if err != nil {
			cancel(err)
		}
		isoDone <- err
	}()
	f.log.Info("streaming", "slot", cfg.Postgres.Slot, "publication", cfg.Postgres.Publication,
		"table", table.String(), "lsn", slot.ConfirmedFlush.String())
	// PostgreSQL's fast shutdown terminates ordinary backends first (SQLSTATE
	// 57P01) and waits for walsenders until their client confirmed
	// everything sent; with Kafka down that never happens. The idle side
	// connection notices the shutdown and ends the session, confirming only
	// what Kafka acknowledged.
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		if err := side.PgConn().WaitForNotification(sctx); err != nil && sctx.Err() == nil {
			cancel(fmt.Errorf("postgres connection lost or server shutting down: %w", err))
		}
	}()
	defer func() { cancel(nil); <-watchDone }()
	stream := replication.NewStream(rcfg, conn, table, tracker, iso.Emit, replication.Observer{
		Status:    f.m.status,
		Received:  f.m.onReceived,
		Streaming: func() { f.m.setState(stateStreaming) },
		Backpressured: func(on bool) {
			if on {
				f.m.setState(stateBackpressured)
			} else {
				f.m.setState(stateStreaming)
			}
		},
	})
	err = stream.Run(sctx)
	cancel(nil)
	<-isoDone
	if cause := context.Cause(sctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}

// heartbeat emits a non-transactional logical message so the slot
// advances even on a database without writes (postgres.heartbeat_interval).
func (f *forwarder) heartbeat(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := f.pool.Exec(ctx, `SELECT pg_logical_emit_message(false, 'walpost-heartbeat', '')`); err != nil && ctx.Err() == nil {
			f.log.Warn("heartbeat failed", "err", redact.String(err.Error()))
		}
	}
}

// reconnectCause labels walpost_reconnects_total.
func reconnectCause(err error) string {
	switch {
	case errors.Is(err, replication.ErrSlotActive):
		return "slot_active"
	case errors.As(err, new(*poison.DestinationError)):
		return "kafka_destination"
	case errors.As(err, new(*pgconn.PgError)):
		return "postgres_error"
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "network"
	}
	if strings.Contains(err.Error(), "kafka") {
		return "kafka"
	}
	return "other"
}
