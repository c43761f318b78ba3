package forwarder

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/replication"
)

// session runs one replication connection until it fails or ctx ends. Its
// three goroutines run in one errgroup, so the first error ends the others
// and is the session's result:
//   - the stream reads the slot and hands events to the isolator; when its
//     context ends it drains what is in flight and confirms it;
//   - the isolator settles failed records (retry, quarantine, or an error
//     that ends the session);
//   - the watcher holds an idle side connection: PostgreSQL's fast shutdown
//     terminates ordinary backends first (SQLSTATE 57P01) and waits for
//     walsenders until their client confirmed everything sent, which never
//     happens with Kafka down; the watcher notices and ends the session,
//     confirming only what the sink acknowledged.
func (f *Forwarder) session(ctx context.Context) error {
	cfg := f.cfg
	rcfg := replication.Config{
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
	// The poison table must be able to take an event before one is read:
	// a schema it refuses would otherwise be found only at the first
	// quarantine (poison.ErrUnwritable, terminal).
	if err := f.store.Check(ctx); err != nil {
		return err
	}
	// The breaker counts the quarantines of earlier sessions and
	// processes within its window.
	recent, err := f.store.Recent(ctx, cfg.Poison.RateWindow)
	if err != nil {
		return err
	}
	if len(recent) > 0 {
		f.log.Info("poison breaker counts earlier quarantines", "poisoned", len(recent),
			"rate_window", cfg.Poison.RateWindow.String(), "max_rate", cfg.Poison.MaxRate)
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
	iso := NewIsolator(IsolatorConfig{
		MaxAttempts:      cfg.Poison.MaxAttempts,
		Backoff:          cfg.Poison.Backoff,
		MaxRate:          cfg.Poison.MaxRate,
		RateWindow:       cfg.Poison.RateWindow,
		DefaultTopic:     cfg.Kafka.Topic,
		Logger:           f.log,
		OnPoisoned:       f.m.onPoisoned,
		OnOrderViolation: f.m.onOrderViolation,
		OnAck:            f.m.onAck(cfg.Kafka.Topic),
		Recent:           recent,
	}, f.sink, f.store, tracker)
	f.m.tracker.Store(tracker)
	f.log.Info("streaming", "slot", cfg.Postgres.Slot, "publication", cfg.Postgres.Publication,
		"table", table.String(), "lsn", slot.ConfirmedFlush.String())
	stream := replication.NewStream(rcfg, conn, table, tracker, iso, replication.Observer{
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

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return iso.Run(gctx) })
	g.Go(func() error {
		if err := side.PgConn().WaitForNotification(gctx); err != nil && gctx.Err() == nil {
			return fmt.Errorf("postgres connection lost or server shutting down: %w", err)
		}
		return nil
	})
	g.Go(func() error { return stream.Run(gctx) })
	return g.Wait()
}
