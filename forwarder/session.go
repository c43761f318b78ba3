package forwarder

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/errgroup"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink/kafka"
)

// session runs one replication connection until it fails or ctx ends. Its
// goroutines run in one errgroup, so the first error ends the others and
// is the session's result:
//   - the stream reads the slot and hands events to the isolator; when its
//     context ends it reads to the end of the open transaction, drains
//     what is in flight and confirms it, by the stop's deadline;
//   - the isolator settles failed records (retry, quarantine, or an error
//     that ends the session); on a clean stop it goes on settling until
//     the stream has returned or the stop's deadline passed
//     (isolatorContext), and ends at once when another goroutine failed;
//   - the watcher holds an idle side connection: PostgreSQL's fast shutdown
//     terminates ordinary backends first (SQLSTATE 57P01) and waits for
//     walsenders until their client confirmed everything sent, which never
//     happens with Kafka down; the watcher notices and ends the session,
//     confirming only what the sink acknowledged. A side connection ended
//     while the server accepts new ones (an administrator's
//     pg_terminate_backend, idle_session_timeout) is replaced and the
//     session goes on: a server shutting down refuses the new one;
//   - the data-loss watch ends the session with ErrDataLoss when Kafka
//     reports data loss (onDataLoss), so the next session produces
//     everything after the slot's confirmed position again.
func (f *Forwarder) session(ctx context.Context, stop *stopClock) error {
	cfg := f.cfg
	rcfg := replication.Config{
		Slot:           cfg.Postgres.Slot,
		Publication:    cfg.Postgres.Publication,
		Table:          cfg.Postgres.Table,
		Columns:        Columns(cfg.Mapping),
		StatusInterval: cfg.Postgres.StatusInterval,
		ReceiveTimeout: cfg.Postgres.ReceiveTimeout,
		DrainTimeout:   cfg.Kafka.FlushTimeout,
		StopDeadline:   stop.deadline,
		Logger:         f.log,
	}
	side, err := replication.ConnectSQL(ctx, cfg.Postgres.URL)
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", replication.Explain(err, cfg.Postgres.Slot, cfg.Postgres.Publication))
	}
	defer side.Close(context.Background())
	// Before anything else reads or writes on a server walpost refuses.
	versionNum, err := replication.CheckServerVersion(ctx, side)
	if err != nil {
		return err
	}
	conn, err := replication.ConnectReplication(ctx, cfg.Postgres.URL)
	if err != nil {
		return fmt.Errorf("replication connection: %w", replication.Explain(err, cfg.Postgres.Slot, cfg.Postgres.Publication))
	}
	defer conn.Close(context.Background())
	// INV-7: walpost's position is checked before Prepare may create a
	// slot; a recorded position never gets a new slot over its gap.
	id, wal, err := position.IdentifyAt(ctx, conn)
	if err != nil {
		return err
	}
	if cur := f.ident.Load(); cur != nil && *cur != id {
		// Another system or timeline behind the URL: no prune pass until
		// a session has checked the position against it.
		f.ident.Store(nil)
	}
	row, found, plan, err := f.checkPosition(ctx, side, conn, id)
	if err != nil {
		f.ident.Store(nil) // the check failed: nothing vouches for the server
		return err
	}
	table, slot, err := replication.Prepare(ctx, side, rcfg)
	if err != nil {
		return err
	}
	// The column types the record formats need (a bytea payload, the json
	// formats), for the sink this session produces through: f.sink here,
	// the transactional sink once openTxn built it.
	var binary bool // a bytea payload
	if !f.eos() {
		if binary, err = f.setColumnTypes(ctx, side, table, f.sink); err != nil {
			return err
		}
	}
	if slot.Active {
		return fmt.Errorf("%w: slot %q is streaming to PostgreSQL backend pid %d", replication.ErrSlotActive, cfg.Postgres.Slot, slot.ActivePID)
	}
	if versionNum >= replication.FailoverSlotsVersionNum && !slot.Failover {
		f.enableFailover(ctx, side, conn)
	}
	// Exactly-once: a producer of this session's own, initialised (fencing
	// any earlier one) only now that the slot is free, so a standby never
	// fences the walpost that streams; the checkpoint is read after it
	// (INV-10).
	var txs *kafka.Sink
	var cp kafka.Checkpoint
	var cpFound bool
	if f.eos() {
		if txs, cp, cpFound, err = f.openTxn(ctx, id); err != nil {
			return err
		}
		defer txs.Close()
		if binary, err = f.setColumnTypes(ctx, side, table, txs); err != nil {
			return err
		}
	}
	// The poison table must be able to take an event before one is read:
	// a schema it refuses would otherwise be found only at the first
	// quarantine (poison.ErrUnwritable, terminal).
	if err := f.store.Check(ctx); err != nil {
		return err
	}
	if binary {
		if err := f.store.CheckBinaryPayload(ctx); err != nil {
			return err
		}
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
	if !found {
		if err := f.recordFirst(ctx, side, id, slot); err != nil {
			return err
		}
	}
	sender, err := replication.SenderTimeout(ctx, conn)
	if err != nil {
		return fmt.Errorf("replication connection: %w", err)
	}
	rcfg.ReceiveTimeout = replication.ReceiveTimeoutFor(cfg.Postgres.ReceiveTimeout, sender)
	rcfg.StatusInterval = replication.StatusIntervalFor(cfg.Postgres.StatusInterval, sender)
	f.logReceiveTimeout(sender, rcfg.ReceiveTimeout, rcfg.StatusInterval)
	// The stream re-reads the slot on the side connection once
	// replication has started (INV-4, a standby may have confirmed since
	// Prepare read it); the watcher takes the connection over after that.
	sideFree := make(chan struct{})
	var freeOnce sync.Once
	rcfg.SlotConfirmed = func(ctx context.Context) (pglogrepl.LSN, error) {
		defer freeOnce.Do(func() { close(sideFree) })
		s, err := replication.ReadSlot(ctx, side, cfg.Postgres.Slot)
		if err != nil {
			return 0, err
		}
		if !s.Exists {
			return 0, fmt.Errorf("slot %q is gone", cfg.Postgres.Slot)
		}
		return s.ConfirmedFlush, nil
	}

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
		Routed:           cfg.Mapping.TopicTemplate != config.RoutedByValue,
		Logger:           f.log,
		OnPoisoned:       f.m.onPoisoned,
		OnOrderViolation: f.m.onOrderViolation,
		OnAck:            f.m.onAck(cfg.Kafka.Topic),
		Recent:           recent,
	}, f.sink, f.store, tracker)
	f.m.tracker.Store(tracker)
	// Prune passes run on the identity this session checked the position
	// against, also while the next session waits (a destination down),
	// until a session finds another identity or its check fails; each
	// pass also checks that its own connection reaches that system.
	f.ident.Store(&id)
	f.log.Info("streaming", "slot", cfg.Postgres.Slot, "publication", cfg.Postgres.Publication,
		"table", table.String(), "lsn", slot.ConfirmedFlush.String())
	var h replication.Handler
	var skip *skipper
	var tx *transactor
	if txs != nil {
		h, skip, tx = f.exactlyOnce(plan, id, wal, slot, iso, tracker, txs, cp, cpFound)
	} else {
		h, skip = f.handlerFor(plan, id, row, slot, iso, tracker)
	}
	pw := &positionWriter{store: position.NewStore(f.pool), row: position.Row{Slot: cfg.Postgres.Slot, Identity: id},
		tracker: tracker, m: f.m, log: f.log, written: max(slot.ConfirmedFlush, row.LSN), known: &f.known, saved: &f.saved}
	f.pw = pw
	status := f.m.status
	if skip != nil && skip.verify != nil {
		v := skip.verify
		status = func(received, confirmed pglogrepl.LSN) {
			v.idle()
			f.m.status(received, confirmed)
		}
	}
	if f.tracer != nil {
		spans := &txnSpans{tracer: f.tracer, tracing: cfg.Mapping.TracingColumn != ""}
		defer spans.close()
		h, status = spans.handler(h), spans.status(status)
	}
	stream := replication.NewStream(rcfg, conn, table, tracker, h, replication.Observer{
		Status:    status,
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

	watchLoss, stopWatch := f.watchDataLoss()
	defer stopWatch()

	g, gctx := errgroup.WithContext(ctx)
	ictx, isoDone := isolatorContext(gctx, stop)
	defer isoDone()
	g.Go(func() error { return watchLoss(gctx) })
	if tx != nil {
		tx.ctx = ictx
		g.Go(func() error { return tx.Run(ictx) })
	} else {
		g.Go(func() error { return iso.Run(ictx) })
	}
	g.Go(func() error {
		select {
		case <-sideFree:
		case <-gctx.Done():
			return nil
		}
		watched := side
		defer func() {
			if watched != side {
				watched.Close(context.Background())
			}
		}()
		for {
			err := watched.PgConn().WaitForNotification(gctx)
			if err == nil || gctx.Err() != nil {
				return nil
			}
			// A server that is shutting down refuses new connections
			// (57P03): then the session ends, so the walsender can stop.
			// A new connection must also reach the server whose
			// walsender streams to this session (a multi-host URL, a
			// pooler or a moved name may lead elsewhere).
			cctx, cancel := context.WithTimeout(gctx, 5*time.Second)
			next, cerr := replication.ConnectSQL(cctx, cfg.Postgres.URL)
			if cerr == nil {
				var pid *int32
				qerr := next.QueryRow(cctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, cfg.Postgres.Slot).Scan(&pid)
				if qerr != nil || pid == nil || uint32(*pid) != conn.PID() {
					next.Close(context.Background())
					cerr = fmt.Errorf("the new connection does not reach the server streaming to this session (slot %q held by pid %v, this session's walsender is %d): %v", cfg.Postgres.Slot, deref32(pid), conn.PID(), qerr)
				}
			}
			cancel()
			if cerr != nil {
				return fmt.Errorf("postgres connection lost or server shutting down: %w (a new connection: %v)", err, redact.Error(cerr))
			}
			f.log.Warn("the server ended walpost's side connection while accepting new ones (pg_terminate_backend?); replaced it, the replication session goes on",
				"slot", cfg.Postgres.Slot, "err", redact.String(err.Error()))
			if watched != side {
				watched.Close(context.Background())
			}
			watched = next
		}
	})
	g.Go(func() error { return pw.run(gctx, cfg.Postgres.PositionInterval) })
	g.Go(func() error {
		// The final status update is sent: what the isolator would
		// settle from now on is confirmed only by the next session.
		defer isoDone()
		return stream.Run(gctx)
	})
	err = g.Wait()
	// A fenced producer ends walpost, whichever goroutine failed first
	// (the replication connection of a walpost that was paused and taken
	// over often fails at the same moment): unless no other walsender
	// holds the slot, so the walpost that fenced it does not stream and
	// stands by (it lost the race for the free slot after its
	// InitProducerID); then the next session initialises again.
	if tx != nil {
		if terr := tx.failure(); errors.Is(terr, kafka.ErrFenced) {
			err = terr
			if !f.slotTakenOver(conn) {
				err = fmt.Errorf("%w: %s", ErrFencedHoldingSlot, terr.Error())
			}
		}
	}
	// The stream has sent its final confirmation: record it too.
	wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	pw.write(wctx, true)
	cancel()
	if skip != nil {
		skip.report()
	}
	return err
}

// enableFailover converts an existing slot that is not a failover slot on a
// 17+ primary (a failure is logged, and streaming goes on without it).
// deref32 is *p, or -1 for nil (for messages).
func deref32(p *int32) int32 {
	if p == nil {
		return -1
	}
	return *p
}

func (f *Forwarder) enableFailover(ctx context.Context, side *pgx.Conn, repl *pgconn.PgConn) {
	name := f.cfg.Postgres.Slot
	ok, err := replication.EnableFailover(ctx, side, repl, name)
	switch {
	case err != nil:
		f.log.Warn("the slot is not a failover slot and cannot be made one: a promoted standby will not have it", "slot", name, "err", err.Error())
	case ok:
		f.log.Info("made the slot a failover slot (it was created without failover): standbys with sync_replication_slots = on keep a copy from now on", "slot", name)
	}
}

// logReceiveTimeout logs the receive timeout and status interval a
// session uses, once, and again only when the server's wal_sender_timeout
// changed.
func (f *Forwarder) logReceiveTimeout(sender, effective, status time.Duration) {
	if f.rtLogged && f.rtSender == sender {
		return
	}
	f.rtLogged, f.rtSender = true, sender
	configured := f.cfg.Postgres.ReceiveTimeout
	switch {
	case sender == 0:
		f.log.Warn("wal_sender_timeout is 0: the server sends no keepalive while it decodes a large transaction, so one that takes longer than postgres.receive_timeout to decode ends the session and is decoded again; set wal_sender_timeout on the server or raise postgres.receive_timeout",
			"receive_timeout", configured.String(), "wal_sender_timeout", "0")
	case effective != configured:
		f.log.Info("receive timeout raised above the server's wal_sender_timeout",
			"receive_timeout", effective.String(), "configured", configured.String(), "wal_sender_timeout", sender.String())
	default:
		f.log.Info("receive timeout", "receive_timeout", effective.String(), "wal_sender_timeout", sender.String())
	}
	if status != f.cfg.Postgres.StatusInterval {
		f.log.Info("status interval lowered to half the server's wal_sender_timeout, so a session that waits for Kafka keeps its connection",
			"status_interval", status.String(), "configured", f.cfg.Postgres.StatusInterval.String(), "wal_sender_timeout", sender.String())
	}
}
