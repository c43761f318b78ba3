package forwarder

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/replication"
)

// checkPosition compares walpost's stored position for the slot with the
// server's identity and the slot, before Prepare may create a slot
// (DESIGN.md, "Position"). It returns the row (found: it exists) and the
// plan for the session.
func (s *session) checkPosition(ctx context.Context, side *pgx.Conn, repl *pgconn.PgConn, id position.Identity) (position.Row, bool, position.Plan, error) {
	name := s.cfg.Postgres.Slot
	row, found, err := position.NewStore(side).Load(ctx, name)
	if err != nil {
		return row, false, position.Plan{}, err
	}
	raised, ok, wentBack := raiseToKnown(row, found, s.known, s.saved)
	s.wentBack = wentBack
	if wentBack {
		defer s.restoredTo(row)
		s.log.Warn("walpost_position is behind what this walpost wrote to it: the database lost a synchronous commit (restored from a snapshot or a backup?), so only the stored position is skipped up to and the events after it are sent again",
			"slot", name, "stored_lsn", row.LSN.String(), "written_lsn", s.saved.LSN.String(), "known_lsn", s.known.LSN.String())
	}
	if ok {
		s.log.Info("walpost's position from before the connection to PostgreSQL was lost is ahead of the stored one (not written before PostgreSQL went away): it is written now and skipped up to",
			"slot", name, "stored_lsn", row.LSN.String(), "stored_timeline", row.Timeline, "lsn", raised.LSN.String(), "timeline", raised.Timeline)
		row = raised
		if err := position.NewStore(side).Save(ctx, row); err == nil {
			s.saved = row
		} else {
			if ctx.Err() != nil {
				return row, found, position.Plan{}, ctx.Err()
			}
			s.log.Warn(msgPositionUnwritten,
				"slot", name, "lsn", row.LSN.String(), "err", err.Error())
		}
	}
	info, err := replication.ReadSlot(ctx, side, name)
	if err != nil {
		return row, found, position.Plan{}, err
	}
	slot := position.Slot{Name: name, Exists: info.Exists, Lost: info.Invalidated(), LostWhy: info.InvalidatedWhy(), Confirmed: info.ConfirmedFlush}
	plan, err := position.Check(row, found, id, slot)
	if err != nil || !plan.TimelineChanged {
		return row, found, plan, err
	}
	// Another timeline: skip up to the switch point at most. Without the
	// history (timeline 1 has none, or it cannot be read) nothing is
	// skipped: events are sent again, never lost.
	if id.Timeline <= 1 {
		return row, found, plan, nil
	}
	hist, err := pglogrepl.TimelineHistory(ctx, repl, id.Timeline)
	if err == nil {
		var across position.Plan
		if across, err = position.AcrossSwitch(row, slot, hist.Content); err == nil {
			plan = across
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return row, found, plan, ctx.Err()
		}
		s.log.Warn("cannot read the timeline history; nothing is skipped", "slot", name, "timeline", id.Timeline, "err", err.Error())
	}
	return row, found, plan, nil
}

// restoredTo takes row, a stored position found behind what this process
// wrote (raiseToKnown's wentBack), as what this process wrote and knows:
// the positions it wrote and confirmed before belong to a WAL the server
// no longer has. The session that found it acts on it (f.wentBack); the
// next ones compare with the restored row, so they neither refuse the
// checkpoint again nor raise the row to the old known position.
func (s *session) restoredTo(row position.Row) {
	s.saved, s.known = row, position.Row{}
}

// msgPositionUnwritten is the warning of a failed position write.
const msgPositionUnwritten = "cannot write walpost's position; forwarding goes on, and a PostgreSQL crash may re-send more events until it is written"

// raiseToKnown returns the stored row raised to known, the position this
// process confirmed in an earlier session, when known is ahead of it on
// the same slot and cluster: acknowledged by Kafka and confirmed, but not
// yet written when PostgreSQL went away (INV-13). A row marked by walpost
// recover, another cluster or no row at all is left to position.Check.
// saved is the last row this process wrote: a stored row behind it on the
// same identity means the database lost a synchronous commit (restored
// from a snapshot or a backup), so its WAL may have gone back below known
// too: then the row is not raised and wentBack is set.
func raiseToKnown(row position.Row, found bool, known, saved position.Row) (raised position.Row, ok, wentBack bool) {
	if !found || known.Slot != row.Slot || known.SystemID != row.SystemID || !row.RecoveringSince.IsZero() {
		return row, false, false
	}
	if saved.Slot == row.Slot && saved.Identity == row.Identity && row.LSN < saved.LSN {
		return row, false, true
	}
	if known.Timeline < row.Timeline || (known.Timeline == row.Timeline && known.LSN <= row.LSN) {
		return row, false, false
	}
	row.Timeline, row.LSN = known.Timeline, known.LSN
	if !known.LastCommit.IsZero() {
		row.LastCommit = known.LastCommit
	}
	return row, true, false
}

// positionWriter writes the tracker's position to walpost_position over
// the side pool, off the stream's goroutine: the stream never waits for it.
type positionWriter struct {
	store   *position.Store
	row     position.Row // slot and identity
	tracker *checkpoint.Tracker
	m       *metrics
	log     *slog.Logger

	txns    uint64        // Position.Txns at the last write
	written pglogrepl.LSN // LSN of the last write, or the stored one
	failing bool
	known   *position.Row // the Forwarder's known position (remember)
	saved   *position.Row // the Forwarder's last row written (write)
}

// remember raises the forwarder's known position to the tracker's. It
// runs on the writer's goroutine while the session runs, and after the
// session ended (once the sink flushed) on the sessions loop's.
func (w *positionWriter) remember() {
	if w.known == nil {
		return
	}
	p := w.tracker.Watermark()
	if k := w.known; k.Slot == w.row.Slot && k.Identity == w.row.Identity && k.LSN >= p.LSN {
		return
	}
	r := w.row
	r.LSN, r.LastCommit = p.LSN, p.Commit
	*w.known = r
}

// run writes every interval when a transaction was confirmed since the
// last write, until ctx ends. The session writes once more after its
// stream stopped (write with final set).
func (w *positionWriter) run(ctx context.Context, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			w.write(ctx, false)
		}
	}
}

// write saves the position when a transaction was confirmed since the last
// write; final also saves a watermark moved only by keepalives. Only
// confirmed transactions trigger the periodic write: the position write's
// own WAL moves the keepalive watermark, which would otherwise write a row
// every interval on an idle database.
func (w *positionWriter) write(ctx context.Context, final bool) {
	w.remember()
	p := w.tracker.Watermark()
	if p.Txns == w.txns && !(final && p.LSN > w.written) {
		return
	}
	r := w.row
	r.LSN, r.LastCommit = p.LSN, p.Commit
	if err := w.store.Save(ctx, r); err != nil {
		if ctx.Err() != nil {
			return
		}
		w.m.positionWrites.WithLabelValues("error").Inc()
		if !w.failing {
			w.failing = true
			w.log.Warn(msgPositionUnwritten,
				"slot", r.Slot, "lsn", r.LSN.String(), "err", err.Error())
		}
		return
	}
	w.m.positionWrites.WithLabelValues("ok").Inc()
	if w.saved != nil && (w.saved.Identity != r.Identity || w.saved.Slot != r.Slot || r.LSN > w.saved.LSN) {
		*w.saved = r
	}
	if p.LSN > w.written {
		w.written = p.LSN
		w.m.positionLSN.Set(float64(p.LSN))
	}
	w.txns = p.Txns
	if w.failing {
		w.failing = false
		w.log.Info("position written again", "slot", r.Slot, "lsn", r.LSN.String())
	}
}

// skipper is the stream's handler while a session starts behind walpost's
// stored position: events of transactions that end at or before upTo were
// confirmed before (in Kafka or the poison table) and are marked done
// without being produced; the tracker still seals their transactions, so
// the watermark moves over them. Everything else goes to next.
type skipper struct {
	next    replication.Handler
	tracker *checkpoint.Tracker
	upTo    pglogrepl.LSN
	skipped prometheus.Counter
	log     *slog.Logger
	slot    string
	// Exactly-once: the first ordinal events of the transaction whose
	// commit LSN is partial are in committed Kafka transactions too.
	partial pglogrepl.LSN
	ordinal int
	pseen   int
	// Exactly-once: the checkpoint's claims checked against the WAL
	// (nil: nothing to check), and each skipped event told to the
	// transactor (the next checkpoint's anchor).
	verify *anchorCheck
	onSkip func(*outbox.Event)

	n           int
	first, last pglogrepl.LSN // commit LSNs of the first and last skipped events
	over        bool          // a transaction ending past upTo was seen
	reported    bool
}

// Emit skips the event when its transaction is already confirmed.
// INV-7: Emit knows the transaction's commit LSN C (the start of its commit
// record), not its end E; upTo is a record boundary at or past the end of
// every transaction it confirms, never inside a commit record, so
// C < upTo ⇔ E ≤ upTo (DESIGN.md, "Position").
func (s *skipper) Emit(ev *outbox.Event, t checkpoint.Ticket) {
	if s.verify != nil && !s.verify.event(ev, s.pseen) {
		return // refuted: the session ends, the event is read again
	}
	// INV-11: the events of a PostgreSQL transaction are decoded in the
	// same order every time, so the first ordinal are those committed.
	skipPartial := s.partial != 0 && ev.CommitLSN == s.partial && s.pseen < s.ordinal
	if skipPartial {
		s.pseen++
	}
	if skipPartial || (!s.over && ev.CommitLSN < s.upTo) {
		if s.n == 0 {
			s.first = ev.CommitLSN
		}
		s.n++
		s.last = ev.CommitLSN
		s.skipped.Inc()
		if s.onSkip != nil {
			s.onSkip(ev)
		}
		s.tracker.Done(t)
		return
	}
	s.next.Emit(ev, t)
}

// Commit passes the transaction end on and ends skipping at the first
// transaction past upTo.
func (s *skipper) Commit(end pglogrepl.LSN) {
	if s.verify != nil {
		s.verify.commit(end)
	}
	if !s.over && end > s.upTo {
		s.over = true
		s.report()
	}
	s.next.Commit(end)
}

// report logs the skipped range once: when the stream passed upTo, or when
// the session ended before.
func (s *skipper) report() {
	if s.reported {
		return
	}
	s.reported = true
	s.log.Info("skipped events already confirmed before the slot lost its position",
		"slot", s.slot, "from_lsn", s.tracker.Started().String(), "to_lsn", s.upTo.String(),
		"events", s.n, "first_commit_lsn", s.first.String(), "last_commit_lsn", s.last.String(), "complete", s.over)
}

// handlerFor returns the stream's handler for a session planned with plan:
// the isolator itself unless the slot is behind the stored position.
func (s *session) handlerFor(plan position.Plan, id position.Identity, row position.Row, slot replication.SlotInfo, iso *isolator, tracker *checkpoint.Tracker) (replication.Handler, *skipper) {
	name := s.cfg.Postgres.Slot
	if plan.TimelineChanged {
		s.m.timelineChanged.Inc()
		s.log.Warn("the timeline changed since walpost recorded its position; only transactions ending at or before the switch point are skipped: those after it and after the slot's position are sent again (LSNs past the switch point belong to the new timeline)",
			"slot", name, "slot_lsn", slot.ConfirmedFlush.String(), "position_lsn", row.LSN.String(),
			"position_timeline", row.Timeline, "timeline", id.Timeline, "switch_point", plan.SwitchPoint.String(), "skip_to", plan.SkipTo.String())
	}
	if plan.SkipTo <= slot.ConfirmedFlush {
		return iso, nil
	}
	s.log.Info("the slot is behind walpost's position (PostgreSQL lost a confirmed position in a crash or restart): transactions ending at or before the position are skipped",
		"slot", name, "slot_lsn", slot.ConfirmedFlush.String(), "position_lsn", plan.SkipTo.String(),
		"bytes", uint64(plan.SkipTo-slot.ConfirmedFlush))
	sk := &skipper{next: iso, tracker: tracker, upTo: plan.SkipTo, skipped: s.m.skipped.WithLabelValues("already_confirmed"),
		log: s.log, slot: name}
	return sk, sk
}

// recordFirst writes the position row of a first install (no row), so a
// slot dropped before the first transaction is noticed as well.
func (s *session) recordFirst(ctx context.Context, side *pgx.Conn, id position.Identity, slot replication.SlotInfo) error {
	r := position.Row{Slot: s.cfg.Postgres.Slot, Identity: id, LSN: slot.ConfirmedFlush}
	if err := position.NewStore(side).Save(ctx, r); err != nil {
		return fmt.Errorf("record the first position: %w", err)
	}
	s.log.Info("recorded walpost's position", "slot", r.Slot, "lsn", r.LSN.String(), "system_identifier", id.SystemID, "timeline", id.Timeline)
	return nil
}
