package forwarder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/kafkaconf"
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/poison"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// session is one replication connection's pipeline. Its goroutines run
// in one errgroup (serve), so the first error ends the others and is the
// session's result:
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
//   - the data-loss watch ends the session with errDataLoss when Kafka
//     reports data loss (onDataLoss), so the next session produces
//     everything after the slot's confirmed position again.
type session struct {
	cfg     *config.Config
	log     *slog.Logger
	m       *metrics
	hooks   kafkaHooks
	tracer  trace.Tracer // nil without otel.enabled
	sink    sink.Sink    // the at-least-once sink; nil in exactly-once mode
	store   *poison.Store
	pool    *pgxpool.Pool
	stop    *stopClock
	*memory // carried from one session to the next, the Forwarder's

	cleanups []func() // stacked by open's steps, run by close in reverse

	// What open found and built, in the order of its steps.
	rcfg       replication.Config
	side       *pgx.Conn
	versionNum int
	conn       *pgconn.PgConn
	id         position.Identity
	wal        pglogrepl.LSN // the server's WAL position at the start (IDENTIFY_SYSTEM)
	row        position.Row  // walpost_position's row, when found
	found      bool
	plan       position.Plan
	table      replication.TableName
	slot       replication.SlotInfo
	binary     bool        // a bytea payload
	txs        *kafka.Sink // exactly-once: this session's transactional producer
	cp         kafka.TxnMark
	cpFound    bool
	recent     []time.Duration // quarantines within poison.rate_window
	sideFree   chan struct{}   // closed once the stream re-read the slot on side
	tracker    *checkpoint.Tracker
	budget     *checkpoint.Budget
	pause      *checkpoint.Pause
	iso        *isolator
	h          replication.Handler
	skip       *skipper
	tx         *transactor
	pw         *positionWriter
	stream     *replication.Stream
	spans      *txnSpans
}

// memory is what the Forwarder carries from one session to the next
// (sessions run one at a time).
type memory struct {
	// Record-level refusals per event in exactly-once mode, across
	// sessions (transactor).
	refused refusals
	// The receive timeout last logged.
	rtLogged bool
	rtSender time.Duration // the wal_sender_timeout it was logged for
	// known is the position this process confirmed last, written to
	// walpost_position or not, and pw the last session's position writer:
	// a session that starts after PostgreSQL went away skips up to known,
	// not only up to the stored row (DESIGN.md, INV-13).
	known position.Row
	saved position.Row // the last row this process wrote
	pw    *positionWriter
	// wentBack: the last checkPosition found walpost_position behind what
	// this process wrote (raiseToKnown); refuted: the last checkpoint a
	// session found not to match the server's WAL (anchorCheck), never
	// used again.
	wentBack bool
	refuted  *kafka.TxnMark
	// The server identity the last session checked walpost's position
	// against (nil: none yet); prune passes run only on it (retention.go).
	ident atomic.Pointer[position.Identity]
	// The running session's data-loss signal (onDataLoss).
	lost atomic.Pointer[chan error]
}

// newSession prepares a session; it connects to nothing.
func (f *Forwarder) newSession(stop *stopClock) *session {
	return &session{cfg: f.cfg, log: f.log, m: f.m, hooks: f.hooks(), tracer: f.tracer, sink: f.sink,
		store: f.store, pool: f.pool, stop: stop, memory: &f.memory}
}

// run opens the session, serves it until it fails or ctx ends, and closes
// what it opened.
func (s *session) run(ctx context.Context) error {
	defer s.close()
	if err := s.open(ctx); err != nil {
		return err
	}
	return s.serve(ctx)
}

// open runs the steps that come before the first byte read from the slot,
// in order; a step that opens something stacks its cleanup (close).
func (s *session) open(ctx context.Context) error {
	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"connect", s.connect},
		{"check walpost's position", s.checkPositionStep},
		{"prepare the slot", s.prepare},
		{"open the transactional producer", s.openProducer},
		{"check the poison table", s.checkPoison},
		{"tune the receive timeout", s.tuneTimeouts},
		{"build the pipeline", s.build},
	}
	for _, step := range steps {
		s.log.Debug("session: "+step.name, "slot", s.cfg.Postgres.Slot)
		if err := step.run(ctx); err != nil {
			return err
		}
	}
	return nil
}

// later stacks a cleanup for close.
func (s *session) later(f func()) { s.cleanups = append(s.cleanups, f) }

// close runs the stacked cleanups, last first.
func (s *session) close() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
}

// connect opens the side connection, checks the server's version, and
// opens the replication connection.
func (s *session) connect(ctx context.Context) error {
	cfg := s.cfg
	s.rcfg = replication.Config{
		Slot:           cfg.Postgres.Slot,
		Publication:    cfg.Postgres.Publication,
		Table:          cfg.Postgres.Table,
		Columns:        kafkaconf.Columns(cfg.Mapping),
		StatusInterval: cfg.Postgres.StatusInterval,
		ReceiveTimeout: cfg.Postgres.ReceiveTimeout,
		DrainTimeout:   cfg.Kafka.FlushTimeout,
		StopDeadline:   s.stop.deadline,
		Logger:         s.log,
	}
	side, err := replication.ConnectSQL(ctx, cfg.Postgres.URL)
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", replication.Explain(err, cfg.Postgres.Slot, cfg.Postgres.Publication))
	}
	s.side = side
	s.later(func() { side.Close(context.Background()) })
	// Before anything else reads or writes on a server walpost refuses.
	if s.versionNum, err = replication.CheckServerVersion(ctx, side); err != nil {
		return err
	}
	conn, err := replication.ConnectReplication(ctx, cfg.Postgres.URL)
	if err != nil {
		return fmt.Errorf("replication connection: %w", replication.Explain(err, cfg.Postgres.Slot, cfg.Postgres.Publication))
	}
	s.conn = conn
	s.later(func() { conn.Close(context.Background()) })
	return nil
}

// checkPositionStep identifies the server and checks walpost's position
// against it. INV-7: before Prepare may create a slot; a recorded
// position never gets a new slot over its gap.
func (s *session) checkPositionStep(ctx context.Context) error {
	var err error
	if s.id, s.wal, err = position.IdentifyAt(ctx, s.conn); err != nil {
		return err
	}
	if cur := s.ident.Load(); cur != nil && *cur != s.id {
		// Another system or timeline behind the URL: no prune pass until
		// a session has checked the position against it.
		s.ident.Store(nil)
	}
	s.row, s.found, s.plan, err = s.checkPosition(ctx, s.side, s.conn, s.id)
	if err != nil {
		s.ident.Store(nil) // the check failed: nothing vouches for the server
	}
	return err
}

// prepare checks the publication and the slot (creating it when missing),
// the column types the record formats need, that no one else streams from
// the slot, and makes it a failover slot on 17+.
func (s *session) prepare(ctx context.Context) error {
	var err error
	if s.table, s.slot, err = replication.Prepare(ctx, s.side, s.rcfg); err != nil {
		return err
	}
	// The column types of the sink this session produces through: s.sink
	// here, the transactional sink once openProducer built it.
	if !eos(s.cfg) {
		if s.binary, err = s.setColumnTypes(ctx, s.side, s.table, s.sink); err != nil {
			return err
		}
	}
	if s.slot.Active {
		return fmt.Errorf("%w: slot %q is streaming to PostgreSQL backend pid %d", replication.ErrSlotActive, s.cfg.Postgres.Slot, s.slot.ActivePID)
	}
	if s.versionNum >= replication.FailoverSlotsVersionNum && !s.slot.Failover {
		s.enableFailover(ctx, s.side, s.conn)
	}
	return nil
}

// openProducer, in exactly-once mode: a producer of this session's own,
// initialised (fencing any earlier one) only now that the slot is free, so
// a standby never fences the walpost that streams; the checkpoint is read
// after it (INV-10).
func (s *session) openProducer(ctx context.Context) error {
	if !eos(s.cfg) {
		return nil
	}
	var err error
	if s.txs, s.cp, s.cpFound, err = s.openTxn(ctx, s.id); err != nil {
		return err
	}
	s.later(s.txs.Close)
	// The server's WAL position again, now that the checkpoint is read:
	// the one of the session's start is older than a checkpoint that
	// another walpost of the slot committed meanwhile (it streamed until
	// this one's InitProducerID fenced it), which would then look past
	// the server's WAL and be refused, and its events sent again.
	if s.conn != nil {
		id, wal, err := position.IdentifyAt(ctx, s.conn)
		if err != nil {
			return err
		}
		if id == s.id {
			s.wal = wal
		}
	}
	s.binary, err = s.setColumnTypes(ctx, s.side, s.table, s.txs)
	return err
}

// checkPoison checks that the poison table can take an event before one
// is read (a schema it refuses would otherwise be found only at the first
// quarantine: poison.ErrUnwritable, terminal), reads the quarantines the
// breaker counts, and records the first position of a first install.
func (s *session) checkPoison(ctx context.Context) error {
	if err := s.store.Check(ctx); err != nil {
		return err
	}
	if s.binary {
		if err := s.store.CheckBinaryPayload(ctx); err != nil {
			return err
		}
	}
	// The breaker counts the quarantines of earlier sessions and
	// processes within its window.
	var err error
	if s.recent, err = s.store.Recent(ctx, s.cfg.Poison.RateWindow); err != nil {
		return err
	}
	if len(s.recent) > 0 {
		s.log.Info("poison breaker counts earlier quarantines", "poisoned", len(s.recent),
			"rate_window", s.cfg.Poison.RateWindow.String(), "max_rate", s.cfg.Poison.MaxRate)
	}
	if !s.found {
		return s.recordFirst(ctx, s.side, s.id, s.slot)
	}
	return nil
}

// tuneTimeouts fits the receive timeout and the status interval to the
// server's wal_sender_timeout.
func (s *session) tuneTimeouts(ctx context.Context) error {
	sender, err := replication.SenderTimeout(ctx, s.conn)
	if err != nil {
		return fmt.Errorf("replication connection: %w", err)
	}
	s.rcfg.ReceiveTimeout = replication.ReceiveTimeoutFor(s.cfg.Postgres.ReceiveTimeout, sender)
	s.rcfg.StatusInterval = replication.StatusIntervalFor(s.cfg.Postgres.StatusInterval, sender)
	s.logReceiveTimeout(sender, s.rcfg.ReceiveTimeout, s.rcfg.StatusInterval)
	return nil
}

// build makes the frontier, the budget, the isolator, the handler, the
// position writer and the stream.
func (s *session) build(context.Context) error {
	cfg := s.cfg
	s.rcfg.SlotConfirmed = s.slotConfirmed()
	s.budget = checkpoint.NewBudget(checkpoint.Limits{
		MaxEvents: cfg.Pipeline.MaxInFlightEvents,
		MaxBytes:  cfg.Pipeline.MaxInFlightBytes,
	})
	s.tracker, s.pause = checkpoint.New(s.slot.ConfirmedFlush, s.budget), checkpoint.NewPause()
	s.iso = newIsolator(isolatorConfig{
		MaxAttempts:      cfg.Poison.MaxAttempts,
		Backoff:          cfg.Poison.Backoff,
		MaxRate:          cfg.Poison.MaxRate,
		RateWindow:       cfg.Poison.RateWindow,
		DefaultTopic:     cfg.Kafka.Topic,
		Routed:           cfg.Mapping.TopicTemplate != config.RoutedByValue,
		Logger:           s.log,
		OnPoisoned:       s.m.onPoisoned,
		OnOrderViolation: s.m.onOrderViolation,
		OnAck:            s.m.onAck(cfg.Kafka.Topic),
		Recent:           s.recent,
	}, s.sink, s.store, settler{s.tracker, s.pause})
	s.m.tracker.Store(s.tracker)
	s.m.budget.Store(s.budget)
	// Prune passes run on the identity this session checked the position
	// against, also while the next session waits (a destination down),
	// until a session finds another identity or its check fails; each
	// pass also checks that its own connection reaches that system.
	id := s.id
	s.ident.Store(&id)
	s.log.Info("streaming", "slot", cfg.Postgres.Slot, "publication", cfg.Postgres.Publication,
		"table", s.table.String(), "lsn", s.slot.ConfirmedFlush.String())
	if s.txs != nil {
		s.h, s.skip, s.tx = s.exactlyOnce(s.plan, s.id, s.wal, s.slot, s.iso, s.tracker, s.txs, s.cp, s.cpFound)
	} else {
		s.h, s.skip = s.handlerFor(s.plan, s.id, s.row, s.slot, s.iso, s.tracker)
	}
	s.pw = &positionWriter{store: position.NewStore(s.pool), row: position.Row{Slot: cfg.Postgres.Slot, Identity: s.id},
		tracker: s.tracker, m: s.m, log: s.log, written: max(s.slot.ConfirmedFlush, s.row.LSN), known: &s.known, saved: &s.saved}
	s.memory.pw = s.pw
	h := s.h
	if s.tracer != nil {
		s.spans = &txnSpans{tracer: s.tracer, tracing: cfg.Mapping.TracingColumn != ""}
		s.later(s.spans.close)
		h = s.spans.handler(h)
	}
	s.stream = replication.NewStream(s.rcfg, s.conn, s.table, replication.Flow{Frontier: s.tracker, Budget: s.budget, Pause: s.pause},
		h, s.observer())
	return nil
}

// slotConfirmed is the stream's re-read of the slot on the side
// connection once replication has started (INV-4, a standby may have
// confirmed since Prepare read it); the watcher takes the connection over
// after that (sideFree).
func (s *session) slotConfirmed() func(context.Context) (pglogrepl.LSN, error) {
	s.sideFree = make(chan struct{})
	var freeOnce sync.Once
	return func(ctx context.Context) (pglogrepl.LSN, error) {
		defer freeOnce.Do(func() { close(s.sideFree) })
		slot, err := replication.ReadSlot(ctx, s.side, s.cfg.Postgres.Slot)
		if err != nil {
			return 0, err
		}
		if !slot.Exists {
			return 0, fmt.Errorf("slot %q is gone", s.cfg.Postgres.Slot)
		}
		return slot.ConfirmedFlush, nil
	}
}

// observer reports the stream's progress to the metrics (and to the
// checkpoint's verification while the stream is idle).
func (s *session) observer() replication.Observer {
	status := s.m.status
	if s.skip != nil && s.skip.verify != nil {
		v := s.skip.verify
		status = func(received, confirmed pglogrepl.LSN) {
			v.idle()
			s.m.status(received, confirmed)
		}
	}
	if s.spans != nil {
		status = s.spans.status(status)
	}
	return replication.Observer{
		Status:    status,
		Received:  s.m.onReceived,
		Streaming: func() { s.m.setState(stateStreaming) },
		Backpressured: func(on bool) {
			if on {
				s.m.setState(stateBackpressured)
			} else {
				s.m.setState(stateStreaming)
			}
		},
	}
}

// actor is one of a session's goroutines.
type actor struct {
	name string
	run  func() error
}

// serve runs the session's actors in one errgroup until the first fails
// or ctx ends, then records the final position.
func (s *session) serve(ctx context.Context) error {
	watchLoss, stopWatch := s.watchDataLoss()
	defer stopWatch()
	g, gctx := errgroup.WithContext(ctx)
	ictx, isoDone := isolatorContext(gctx, s.stop)
	defer isoDone()
	if s.tx != nil {
		// Set before any actor runs: the stream's quarantines use it.
		s.tx.ctx = ictx
	}
	actors := []actor{
		{"data-loss watch", func() error { return watchLoss(gctx) }},
		{"isolator", func() error { return s.settle(ictx) }},
		{"side-connection watcher", func() error { return s.watchSide(gctx) }},
		{"position writer", func() error { return s.pw.run(gctx, s.cfg.Postgres.PositionInterval) }},
		// The final status update is sent: what the isolator would
		// settle from now on is confirmed only by the next session.
		{"stream", func() error { defer isoDone(); return s.stream.Run(gctx) }},
	}
	for _, a := range actors {
		g.Go(func() error {
			stopping := context.AfterFunc(gctx, func() { s.log.Debug("stopping " + a.name) })
			defer stopping()
			err := a.run()
			s.log.Debug(a.name+" stopped", "err", err)
			return err
		})
	}
	err := s.fenced(g.Wait())
	// The stream has sent its final confirmation: record it too.
	wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	s.pw.write(wctx, true)
	cancel()
	if s.skip != nil {
		s.skip.report()
	}
	return err
}

// settle runs the isolator, or in exactly-once mode the transactor.
func (s *session) settle(ctx context.Context) error {
	if s.tx != nil {
		return s.tx.Run(ctx)
	}
	return s.iso.Run(ctx)
}

// fenced: a fenced producer ends walpost, whichever goroutine failed first
// (the replication connection of a walpost that was paused and taken over
// often fails at the same moment): unless no other walsender holds the
// slot, so the walpost that fenced it does not stream and stands by (it
// lost the race for the free slot after its InitProducerID); then the next
// session initialises again.
func (s *session) fenced(err error) error {
	if s.tx == nil {
		return err
	}
	terr := s.tx.failure()
	if !errors.Is(terr, kafka.ErrFenced) {
		return err
	}
	if !s.slotTakenOver(s.conn) {
		return fmt.Errorf("%w: %s", errFencedHoldingSlot, terr.Error())
	}
	return terr
}

// watchSide waits on the idle side connection (once the stream is done
// with it) and ends the session when the server ends it and refuses a new
// one, or the new one reaches another server.
func (s *session) watchSide(ctx context.Context) error {
	select {
	case <-s.sideFree:
	case <-ctx.Done():
		return nil
	}
	watched := s.side
	defer func() {
		if watched != s.side {
			watched.Close(context.Background())
		}
	}()
	for {
		err := watched.PgConn().WaitForNotification(ctx)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		next, cerr := s.reconnectSide(ctx)
		if cerr != nil {
			return fmt.Errorf("postgres connection lost or server shutting down: %w (a new connection: %v)", err, redact.Error(cerr))
		}
		s.log.Warn("the server ended walpost's side connection while accepting new ones (pg_terminate_backend?); replaced it, the replication session goes on",
			"slot", s.cfg.Postgres.Slot, "err", redact.String(err.Error()))
		if watched != s.side {
			watched.Close(context.Background())
		}
		watched = next
	}
}

// reconnectSide opens a new side connection. A server that is shutting
// down refuses new connections (57P03): then the session ends, so the
// walsender can stop. A new connection must also reach the server whose
// walsender streams to this session (a multi-host URL, a pooler or a moved
// name may lead elsewhere).
func (s *session) reconnectSide(ctx context.Context) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	next, err := replication.ConnectSQL(cctx, s.cfg.Postgres.URL)
	if err != nil {
		return nil, err
	}
	var pid *int32
	qerr := next.QueryRow(cctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, s.cfg.Postgres.Slot).Scan(&pid)
	if qerr != nil || pid == nil || uint32(*pid) != s.conn.PID() {
		next.Close(context.Background())
		return nil, fmt.Errorf("the new connection does not reach the server streaming to this session (slot %q held by pid %v, this session's walsender is %d): %v", s.cfg.Postgres.Slot, deref32(pid), s.conn.PID(), qerr)
	}
	return next, nil
}

// deref32 is *p, or -1 for nil (for messages).
func deref32(p *int32) int32 {
	if p == nil {
		return -1
	}
	return *p
}

// enableFailover converts an existing slot that is not a failover slot on a
// 17+ primary (a failure is logged, and streaming goes on without it).
func (s *session) enableFailover(ctx context.Context, side *pgx.Conn, repl *pgconn.PgConn) {
	name := s.cfg.Postgres.Slot
	ok, err := replication.EnableFailover(ctx, side, repl, name)
	switch {
	case err != nil:
		s.log.Warn("the slot is not a failover slot and cannot be made one: a promoted standby will not have it", "slot", name, "err", err.Error())
	case ok:
		s.log.Info("made the slot a failover slot (it was created without failover): standbys with sync_replication_slots = on keep a copy from now on", "slot", name)
	}
}

// logReceiveTimeout logs the receive timeout and status interval a
// session uses, once, and again only when the server's wal_sender_timeout
// changed.
func (s *session) logReceiveTimeout(sender, effective, status time.Duration) {
	if s.rtLogged && s.rtSender == sender {
		return
	}
	s.rtLogged, s.rtSender = true, sender
	configured := s.cfg.Postgres.ReceiveTimeout
	switch {
	case sender == 0:
		s.log.Warn("wal_sender_timeout is 0: the server sends no keepalive while it decodes a large transaction, so one that takes longer than postgres.receive_timeout to decode ends the session and is decoded again; set wal_sender_timeout on the server or raise postgres.receive_timeout",
			"receive_timeout", configured.String(), "wal_sender_timeout", "0")
	case effective != configured:
		s.log.Info("receive timeout raised above the server's wal_sender_timeout",
			"receive_timeout", effective.String(), "configured", configured.String(), "wal_sender_timeout", sender.String())
	default:
		s.log.Info("receive timeout", "receive_timeout", effective.String(), "wal_sender_timeout", sender.String())
	}
	if status != s.cfg.Postgres.StatusInterval {
		s.log.Info("status interval lowered to half the server's wal_sender_timeout, so a session that waits for Kafka keeps its connection",
			"status_interval", status.String(), "configured", s.cfg.Postgres.StatusInterval.String(), "wal_sender_timeout", sender.String())
	}
}
