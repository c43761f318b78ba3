package replication

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/outbox"
)

// Handler receives what the stream reads, on the stream's goroutine.
type Handler interface {
	// Emit hands one event on (to the sink). It must not block for long;
	// the budget bounds how many events are outstanding. The ticket is
	// passed to Tracker.Done once the event is handled.
	Emit(ev *outbox.Event, t checkpoint.Ticket)
	// Commit reports the end of a PostgreSQL transaction whose events
	// were all emitted: end is its end LSN, the position that confirms
	// it. It comes after the transaction's last Emit and before the next
	// transaction's first, also for a transaction without outbox
	// events.
	Commit(end pglogrepl.LSN)
}

// HandlerFuncs adapts two functions to Handler; a nil Commit ignores
// transaction ends.
type HandlerFuncs struct {
	EmitFunc   func(ev *outbox.Event, t checkpoint.Ticket)
	CommitFunc func(end pglogrepl.LSN)
}

// Emit calls h.EmitFunc.
func (h HandlerFuncs) Emit(ev *outbox.Event, t checkpoint.Ticket) { h.EmitFunc(ev, t) }

// Commit calls h.CommitFunc when set.
func (h HandlerFuncs) Commit(end pglogrepl.LSN) {
	if h.CommitFunc != nil {
		h.CommitFunc(end)
	}
}

// Observer receives progress for metrics and health; any field may be nil.
type Observer struct {
	// Status is called after each standby status update.
	Status func(received, confirmed pglogrepl.LSN)
	// Received is called for each event handed on.
	Received func(ev *outbox.Event)
	// Backpressured is called when the reader pauses (true) or resumes.
	Backpressured func(bool)
	// Streaming is called once replication has started.
	Streaming func()
}

// Stream reads one replication session. Create it with NewStream; Run it
// once.
type Stream struct {
	cfg     Config
	layout  *layout // cfg.Columns resolved; nil: walpost's layout
	conn    *pgconn.PgConn
	table   TableName
	tracker Frontier
	budget  Budget
	pause   Pause
	h       Handler
	obs     Observer

	rels       map[uint32]*relation
	txn        *checkpoint.Txn
	begin      pglogrepl.BeginMessage
	commitText string // begin.FinalLSN as X/X, once per transaction
	seq        int
	received   pglogrepl.LSN
	sent       pglogrepl.LSN // last flush position sent
	lastSent   time.Time
	lastRecv   time.Time // last message from the server while reading (to a status interval)
	recvd      bool      // a message arrived since lastRecv was last set
	rdl        time.Time // read deadline set on the connection; zero: none or unknown
	recvAt     time.Time // when the message being handled was received
	sentAt     time.Time // when the server sent the insert being handled (its clock)
	lowat      *lowatReader
	warned     map[pglogrepl.MessageType]bool
	stopBy     time.Time // the drain's deadline once ctx ended (stopDeadline)
}

// statusTick is how soon a moved watermark is reported to the server.
const statusTick = 200 * time.Millisecond

// NewStream prepares a session on an open replication connection conn. The
// frontier starts at the slot's confirmed position.
func NewStream(cfg Config, conn *pgconn.PgConn, table TableName, flow Flow, h Handler, obs Observer) *Stream {
	cfg.defaults()
	flow.defaults()
	return &Stream{
		cfg: cfg, conn: conn, table: table, tracker: flow.Frontier, budget: flow.Budget, pause: flow.Pause,
		h: h, obs: obs, layout: cfg.Columns.resolve(),
		rels: map[uint32]*relation{}, warned: map[pglogrepl.MessageType]bool{},
		lowat: lowatOf(conn),
	}
}

// Run streams until ctx ends or the session fails. When ctx ends it reads
// on to the end of the open transaction, waits for in-flight events (both
// by one deadline: Config.StopDeadline, or DrainTimeout), sends a final
// status update with the watermark and returns nil. It does not close the
// connection.
func (s *Stream) Run(ctx context.Context) error {
	if err := s.start(ctx); err != nil {
		return err
	}
	nextStatus := time.Now().Add(s.cfg.StatusInterval)
	paused := false
	// Messages are received without a context (a context per message costs
	// a timer and a watcher): the read deadline on the connection wakes the
	// loop for status updates, and the end of runCtx moves it to now.
	nc := s.conn.Conn()
	interrupt := func() { _ = nc.SetReadDeadline(time.Now()) }
	defer context.AfterFunc(ctx, interrupt)()
	defer func() { _ = nc.SetReadDeadline(time.Time{}) }()
	// runCtx governs receiving. When ctx ends in the middle of a
	// transaction, the stream reads on (by the stop's deadline) until its
	// Commit, so a clean stop confirms it and a restart sends no duplicate.
	runCtx := ctx
	// now is read once per message: right after it is received (it is
	// also the event's ReceivedAt), and again at the top of the loop
	// only when the last round did not receive one.
	var now time.Time
	fresh := false
	for {
		if ctx.Err() != nil {
			if s.txn == nil || Aborted(ctx) {
				return s.shutdown(ctx)
			}
			if runCtx == ctx {
				var cancel context.CancelFunc
				runCtx, cancel = context.WithDeadline(context.Background(), s.stopDeadline())
				defer cancel()
				defer context.AfterFunc(runCtx, interrupt)()
				s.rdl = time.Time{}
				s.cfg.Logger.Info("stopping after the current transaction", "slot", s.cfg.Slot, "xid", s.begin.Xid)
			}
			if runCtx.Err() != nil {
				return s.shutdown(ctx)
			}
		}
		if !fresh {
			now = time.Now()
		}
		fresh = false
		if !now.Before(nextStatus) || (s.tracker.Confirmed() > s.sent && now.Sub(s.lastSent) >= statusTick) {
			// The periodic update asks the server to answer, so a live
			// connection is heard from at least every StatusInterval.
			err := s.sendStatus(runCtx, !now.Before(nextStatus))
			// A cancelled write clears the connection's deadlines.
			s.rdl = time.Time{}
			if err != nil {
				if runCtx.Err() != nil || ctx.Err() != nil {
					continue
				}
				return err
			}
			now = time.Now()
			nextStatus = now.Add(s.cfg.StatusInterval)
		}
		// INV-6: when full (or paused by the isolator), stop reading WAL
		// but keep sending status.
		if s.blocked() {
			if !paused {
				paused = true
				if s.obs.Backpressured != nil {
					s.obs.Backpressured(true)
				}
			}
			wctx, cancel := context.WithDeadline(runCtx, s.nextWake(now, nextStatus))
			s.waitUnblocked(wctx)
			cancel()
			continue
		}
		if paused {
			paused = false
			s.lastRecv, s.recvd = time.Now(), false // nothing was read while paused
			if s.obs.Backpressured != nil {
				s.obs.Backpressured(false)
			}
		}
		armed, err := s.arm(nc, now, nextStatus)
		if err != nil {
			return err
		}
		// runCtx may have ended after the check above and before the
		// deadline was set, which would have undone the interruption.
		if armed && runCtx.Err() != nil {
			s.rdl = time.Time{}
			continue
		}
		msg, err := s.conn.ReceiveMessage(context.Background())
		if err != nil {
			if err := s.receiveFailed(ctx, runCtx, err); err != nil {
				return err
			}
			continue
		}
		s.recvd = true
		now, fresh = time.Now(), true
		s.recvAt = now
		reply, err := s.dispatch(msg, now)
		if err != nil {
			return err
		}
		if reply {
			nextStatus = now
		}
	}
}

// start starts replication and sets the stream's first position.
func (s *Stream) start(ctx context.Context) error {
	// INV-4: start at LSN 0, so the server resumes at the slot's
	// confirmed_flush_lsn; never at IDENTIFY_SYSTEM's position.
	err := pglogrepl.StartReplication(ctx, s.conn, s.cfg.Slot, 0, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication,
		PluginArgs: []string{
			"proto_version '1'",
			fmt.Sprintf("publication_names '%s'", s.cfg.Publication),
			"messages 'true'",
		},
	})
	if err != nil {
		return fmt.Errorf("start replication on slot %q: %w", s.cfg.Slot, Explain(err, s.cfg.Slot, s.cfg.Publication))
	}
	if err := s.catchUp(ctx); err != nil {
		return err
	}
	s.sent = s.tracker.Confirmed()
	s.received = s.sent
	s.lastSent = time.Now()
	s.lastRecv = time.Now()
	if s.obs.Streaming != nil {
		s.obs.Streaming()
	}
	return nil
}

// arm sets the read deadline that wakes the loop, and reports whether it
// moved it. The deadline is moved only when it must come sooner or has
// passed; a wake that comes early just goes round the loop. While reads
// are batched it stays within lowatWait, pushed forward about every
// millisecond while messages arrive.
func (s *Stream) arm(nc net.Conn, now, nextStatus time.Time) (bool, error) {
	wake := s.nextWake(now, nextStatus)
	batching := s.lowat.batching()
	if batching {
		if w := now.Add(lowatWait); w.Before(wake) {
			wake = w
		}
	}
	if !s.rdl.IsZero() && !wake.Before(s.rdl) && now.Before(s.rdl) && (!batching || s.rdl.Sub(now) >= lowatWait/2) {
		return false, nil
	}
	if err := nc.SetReadDeadline(wake); err != nil {
		return false, fmt.Errorf("receive from slot %q: %w", s.cfg.Slot, err)
	}
	s.rdl = wake
	return true, nil
}

// receiveFailed decides what a failed receive means: nil when the loop
// goes on (the read deadline woke it, or the stream is stopping), the
// session's error otherwise (the connection closed or presumed dead).
func (s *Stream) receiveFailed(ctx, runCtx context.Context, err error) error {
	if !pgconn.Timeout(err) && runCtx.Err() == nil && ctx.Err() == nil {
		return fmt.Errorf("receive from slot %q: %w", s.cfg.Slot, err)
	}
	if s.conn.IsClosed() {
		return fmt.Errorf("receive from slot %q: %w", s.cfg.Slot, err)
	}
	s.rdl = time.Time{}
	now := time.Now()
	if s.recvd {
		// Heard from within the last deadline period.
		s.lastRecv, s.recvd = now, false
	}
	if silent := now.Sub(s.lastRecv); silent > s.cfg.ReceiveTimeout && ctx.Err() == nil {
		return fmt.Errorf("receive from slot %q: nothing from the server for %s although it was asked to reply; the connection is presumed dead", s.cfg.Slot, silent.Round(time.Second))
	}
	return nil
}

// dispatch handles one message from the server, received at now; reply
// says a status update is due now (the server asked for one, or a
// keepalive moved the watermark).
func (s *Stream) dispatch(msg pgproto3.BackendMessage, now time.Time) (reply bool, err error) {
	switch m := msg.(type) {
	case *pgproto3.CopyData:
		if len(m.Data) == 0 {
			return false, &DecodeError{LSN: s.received, Err: errEmpty}
		}
		switch m.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
			if err != nil {
				return false, &DecodeError{LSN: s.received, Err: err}
			}
			if pkm.ServerWALEnd > s.received {
				s.received = pkm.ServerWALEnd
			}
			// A quiet outbox on a busy database: confirm the server's
			// WAL end when nothing is in flight (DESIGN.md, PostgreSQL facts).
			moved := s.tracker.Idle(pkm.ServerWALEnd)
			return pkm.ReplyRequested || (moved && now.Sub(s.lastSent) >= statusTick), nil
		case pglogrepl.XLogDataByteID:
			xld, err := pglogrepl.ParseXLogData(m.Data[1:])
			if err != nil {
				return false, &DecodeError{LSN: s.received, Err: err}
			}
			if err := s.handle(xld); err != nil {
				return false, err
			}
		}
	case *pgproto3.ErrorResponse:
		return false, fmt.Errorf("replication on slot %q: %w", s.cfg.Slot, Explain(pgconn.ErrorResponseToPgError(m), s.cfg.Slot, s.cfg.Publication))
	case *pgproto3.CopyDone:
		return false, fmt.Errorf("replication on slot %q: server ended the stream", s.cfg.Slot)
	default:
		// NoticeResponse and ParameterStatus are handled by pgconn.
	}
	return false, nil
}

// catchUp re-reads the slot once replication has started (the slot is now
// ours, so it stays where it is) and moves the tracker's start forward to
// it. INV-4: a standby that confirmed between the read the tracker started
// at and START_REPLICATION is never moved back by the first status update.
func (s *Stream) catchUp(ctx context.Context) error {
	if s.cfg.SlotConfirmed == nil {
		return nil
	}
	at, err := s.cfg.SlotConfirmed(ctx)
	if err != nil {
		return fmt.Errorf("re-read slot %q after starting replication: %w", s.cfg.Slot, err)
	}
	// Nothing is in flight yet: Idle moves the watermark (and the
	// tracker's last end) to at when it is ahead, and only then.
	from := s.tracker.Confirmed()
	s.tracker.Recorded(at)
	if s.tracker.Idle(at) {
		s.cfg.Logger.Info("slot was confirmed ahead while replication started; starting from its position",
			"slot", s.cfg.Slot, "lsn", at.String(), "read_lsn", from.String())
	}
	return nil
}

// nextWake is when the loop must look up from reading: within statusTick
// while events are pending, at lastSent+statusTick when a moved watermark
// has not been sent yet (the last acks of a burst can land while the loop
// is about to read, with nothing pending any more; without this the
// confirmation waited for the next message or the status interval), and at
// nextStatus otherwise.
func (s *Stream) nextWake(now, nextStatus time.Time) time.Time {
	wake := nextStatus
	if s.tracker.Pending() {
		if t := now.Add(statusTick); t.Before(wake) {
			wake = t
		}
	}
	if s.tracker.Confirmed() > s.sent {
		if t := s.lastSent.Add(statusTick); t.Before(wake) {
			wake = t
		}
	}
	return wake
}

func (s *Stream) handle(xld pglogrepl.XLogData) error {
	if end := xld.WALStart + pglogrepl.LSN(len(xld.WALData)); end > s.received {
		s.received = end
	}
	if len(xld.WALData) > 0 && xld.WALData[0] == 'I' {
		// The hot path, without pglogrepl's per-column allocations.
		if s.txn == nil {
			return &DecodeError{LSN: xld.WALStart, Err: errors.New("insert outside a transaction")}
		}
		s.sentAt = xld.ServerTime
		ev, err := s.insertEvent(xld.WALData, xld.WALStart)
		if err != nil {
			return err
		}
		// INV-2: every event gets a ticket; only Done releases it.
		t := s.tracker.Add(s.txn, ev.Size())
		if s.obs.Received != nil {
			s.obs.Received(ev)
		}
		s.h.Emit(ev, t)
		return nil
	}
	// Every other message goes through pglogrepl (inserts never get here).
	msg, err := Decode(xld.WALData, xld.WALStart)
	if err != nil {
		return err
	}
	switch m := msg.(type) {
	case *pglogrepl.BeginMessage:
		if s.txn != nil {
			return &DecodeError{LSN: xld.WALStart, Err: errors.New("begin inside a transaction")}
		}
		txn, err := s.tracker.OpenAt(m.CommitTime)
		if err != nil {
			return err
		}
		s.txn, s.begin, s.seq = txn, *m, 0
		s.commitText = lsnText(m.FinalLSN)
	case *pglogrepl.RelationMessage:
		r := newRelationFor(m, s.lay())
		if r.namespace != s.table.Schema || r.name != s.table.Name {
			return fmt.Errorf("%w: publication %q sends table %s.%s; it must cover only %s", ErrConfig, s.cfg.Publication, r.namespace, r.name, s.table)
		}
		// A new Relation after DDL: an added column is fine, a removed
		// required column is fatal (nothing past the last good event is
		// confirmed, since the stream stops here).
		if err := r.check(); err != nil {
			return err
		}
		if old := s.rels[m.RelationID]; old != nil {
			s.warnDropped(old, r, xld.WALStart)
		}
		s.rels[m.RelationID] = r
	case *pglogrepl.CommitMessage:
		if s.txn == nil {
			return &DecodeError{LSN: xld.WALStart, Err: errors.New("commit outside a transaction")}
		}
		// The handler learns where the transaction ends before the tracker
		// can confirm it.
		s.h.Commit(m.TransactionEndLSN)
		if err := s.tracker.Seal(s.txn, m.TransactionEndLSN); err != nil {
			return err
		}
		s.txn = nil
	case *pglogrepl.LogicalDecodingMessage:
		// A heartbeat (pg_logical_emit_message, non-transactional): nothing
		// to forward, but with nothing in flight the watermark may move to
		// it, so a database without writes does not pin WAL.
		if !m.Transactional && s.txn == nil {
			s.tracker.Idle(xld.WALStart)
		}
	case *pglogrepl.TypeMessage, *pglogrepl.OriginMessage:
		// Metadata: nothing to forward.
	case *pglogrepl.UpdateMessage, *pglogrepl.DeleteMessage, *pglogrepl.TruncateMessage:
		if !s.warned[msg.Type()] {
			s.warned[msg.Type()] = true
			s.cfg.Logger.Warn("publication sends more than inserts; walpost forwards inserts only",
				"publication", s.cfg.Publication, "message", msg.Type().String(), "lsn", xld.WALStart.String())
		}
	default:
		s.cfg.Logger.Warn("ignoring pgoutput message", "message", msg.Type().String(), "lsn", xld.WALStart.String())
	}
	return nil
}

// lsnText is lsn as PostgreSQL writes it, X/X in upper-case hex, as
// pglogrepl.LSN.String does with fmt, which also boxes the low half:
// one allocation, the string, instead of two.
func lsnText(lsn pglogrepl.LSN) string {
	var b [17]byte
	out := appendHexUpper(b[:0], uint32(lsn>>32))
	out = append(out, '/')
	return string(appendHexUpper(out, uint32(lsn)))
}

// appendHexUpper appends v in upper-case hex without leading zeros.
func appendHexUpper(dst []byte, v uint32) []byte {
	start := len(dst)
	dst = strconv.AppendUint(dst, uint64(v), 16)
	for i := start; i < len(dst); i++ {
		if c := dst[i]; c >= 'a' {
			dst[i] = c - 'a' + 'A'
		}
	}
	return dst
}

// droppedEffect is what events lose when an optional column is dropped.
var droppedEffect = [numCols]string{
	colTopic:        "events without it go to kafka.topic",
	colPartitionKey: "events are partitioned by idempotency_key",
	colEventType:    "records no longer carry the event_type header",
	colHeaders:      "records no longer carry the row's headers",
}

// warnDropped logs, once per drop (a Relation message after DDL), each
// optional column old had and r has not: the events still flow, routed
// differently.
func (s *Stream) warnDropped(old, r *relation, lsn pglogrepl.LSN) {
	for c := colTopic; c < numCols; c++ {
		if old.pos[c] >= 0 && r.pos[c] < 0 && !s.lay().required[c] {
			s.cfg.Logger.Warn("outbox column dropped while running: "+droppedEffect[c],
				"slot", s.cfg.Slot, "table", r.namespace+"."+r.name, "column", s.lay().names[c], "lsn", lsn.String())
		}
	}
}

func (s *Stream) sendStatus(ctx context.Context, reply bool) error {
	confirmed := s.tracker.Confirmed()
	write := s.received
	if write < confirmed {
		write = confirmed
	}
	// INV-1: Flush and Apply are the watermark, set explicitly so
	// pglogrepl never copies Write into them.
	err := pglogrepl.SendStandbyStatusUpdate(ctx, s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: write,
		WALFlushPosition: confirmed,
		WALApplyPosition: confirmed,
		ClientTime:       time.Now(),
		ReplyRequested:   reply,
	})
	if err != nil {
		return fmt.Errorf("send status update: %w", err)
	}
	if confirmed > s.sent {
		s.cfg.Logger.Debug("confirmed", "slot", s.cfg.Slot, "lsn", confirmed.String())
	}
	s.sent = confirmed
	s.lastSent = time.Now()
	if s.obs.Status != nil {
		s.obs.Status(s.received, confirmed)
	}
	return nil
}

// stopDeadline is the one deadline of the drain after ctx ended, taken at
// the first call: reading to the open transaction's commit and waiting for
// in-flight events both end by it, so a stop drains within DrainTimeout
// (or by Config.StopDeadline) in total.
func (s *Stream) stopDeadline() time.Time {
	if s.stopBy.IsZero() {
		if s.cfg.StopDeadline != nil {
			s.stopBy = s.cfg.StopDeadline()
		} else {
			s.stopBy = time.Now().Add(s.cfg.DrainTimeout)
		}
	}
	return s.stopBy
}

// shutdown drains in-flight events (by the stop's deadline) while keeping
// the session alive, then reports the final watermark.
func (s *Stream) shutdown(parent context.Context) error {
	// A session aborted by a failure (a cause other than plain
	// cancellation) does not wait for in-flight events: they may never
	// be handled in this session. The watermark is sent as it stands.
	var ctx context.Context
	var cancel context.CancelFunc
	if Aborted(parent) {
		ctx, cancel = context.WithCancel(context.Background())
		cancel()
	} else {
		ctx, cancel = context.WithDeadline(context.Background(), s.stopDeadline())
	}
	defer cancel()
	for ctx.Err() == nil {
		events, _ := s.budget.InFlight()
		if events == 0 {
			break
		}
		wctx, wcancel := context.WithTimeout(ctx, min(time.Second, s.cfg.StatusInterval))
		err := s.budget.WaitDrained(wctx)
		wcancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			s.cfg.Logger.Warn("stopping with events not yet acknowledged; they will be sent again on restart",
				"slot", s.cfg.Slot, "in_flight", events)
			break
		}
		if err := s.sendStatus(ctx, false); err != nil {
			return err
		}
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if err := s.sendStatus(sctx, false); err != nil {
		return err
	}
	// End COPY properly: the server reads the status update before the
	// CopyDone and answers only after it. Closing instead, with WAL unread
	// in our socket, resets the connection and the server may drop the
	// final status update unread.
	s.lowat.off()
	_ = s.conn.Conn().SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := pglogrepl.SendStandbyCopyDone(sctx, s.conn); err != nil {
		s.cfg.Logger.Warn("ending replication: server did not finish the copy cleanly", "slot", s.cfg.Slot, "err", err.Error())
	}
	_ = s.conn.Conn().SetDeadline(time.Time{})
	s.cfg.Logger.Info("replication stopped", "slot", s.cfg.Slot, "lsn", s.sent.String())
	return nil
}

// Aborted reports whether ctx ended with a failure rather than a stop (a
// cause other than context.Canceled): a stream whose context is aborted
// neither reads to the end of the open transaction nor waits for in-flight
// events.
func Aborted(ctx context.Context) bool {
	cause := context.Cause(ctx)
	return cause != nil && !errors.Is(cause, context.Canceled)
}
