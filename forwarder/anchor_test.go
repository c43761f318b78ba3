package forwarder

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink/kafka"
)

// restoredTxn is one transaction of a test WAL.
type restoredTxn struct {
	commit, end pglogrepl.LSN
	at          time.Time
	keys        []string
}

// runWAL streams txns through h with tr as the stream does (tx's commits
// made as its Run makes them), and returns
// the keys handed on to the transactor's sink (produced) and the highest
// watermark the tracker reported after each transaction.
func runWAL(t *testing.T, h replication.Handler, tx *transactor, tr *checkpoint.Tracker, s *fakeTxnSink, txns []restoredTxn) (maxConfirmed pglogrepl.LSN) {
	t.Helper()
	for _, x := range txns {
		txn, err := tr.OpenAt(time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range x.keys {
			e := ev(k, x.commit)
			e.CommitTime = x.at
			h.Emit(e, tr.Add(txn, 1))
			tx.sync()
		}
		h.Commit(x.end)
		tx.sync()
		if err := tr.Seal(txn, x.end); err != nil {
			t.Fatal(err)
		}
		maxConfirmed = max(maxConfirmed, tr.Confirmed())
	}
	return maxConfirmed
}

func eosForwarder() (*session, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	f := &session{cfg: &config.Config{}, log: slog.New(slog.DiscardHandler), m: newMetrics(reg), pause: checkpoint.NewPause(), memory: &memory{}}
	f.cfg.Postgres.Slot = "s"
	f.cfg.Delivery.TransactionInterval = time.Hour
	f.cfg.Delivery.TransactionRecords = 1 // every record commits at once
	f.cfg.Kafka.FlushTimeout = 5 * time.Second
	f.cfg.Poison.MaxAttempts = 2
	return f, reg
}

func refusedCount(t *testing.T, f *session, reason string) float64 {
	t.Helper()
	var m dto.Metric
	if err := f.m.cpRefused.WithLabelValues(reason).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestCheckpointAheadOfRestoredServer: PostgreSQL came back at an earlier
// WAL point on the same system identifier and timeline (a snapshot
// restored: the slot and walpost_position at 0/100) while the checkpoint
// topic says 0/900. The new transactions the server writes at LSNs below
// 0/900 are not the ones the checkpoint covers: none of them may be
// skipped and confirmed. Before the fix the skipper skipped new-1..new-3
// and the tracker confirmed 0/900: lost.
func TestCheckpointAheadOfRestoredServer(t *testing.T) {
	id := position.Identity{SystemID: 7, Timeline: 1}
	old := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	cp := kafka.TxnMark{Slot: "s", SystemID: 7, Timeline: 1, LSN: 0x900, Anchored: true, AnchorCommitLSN: 0x8d0, AnchorCommitTime: old}
	slot := replication.SlotInfo{Exists: true, ConfirmedFlush: 0x100}
	plan := position.Plan{SkipTo: 0x100}
	now := old.Add(time.Hour)
	restored := []restoredTxn{
		{0x1d0, 0x200, now, []string{"new-1"}},
		{0x4d0, 0x500, now.Add(time.Second), []string{"new-2"}},
		{0x8d0, 0x900, now.Add(2 * time.Second), []string{"new-3"}}, // the anchor's LSN, another transaction
		{0x9d0, 0xa00, now.Add(3 * time.Second), []string{"new-4"}},
	}

	t.Run("same process: walpost_position went back", func(t *testing.T) {
		f, _ := eosForwarder()
		f.wentBack = true
		tr := checkpoint.New(slot.ConfirmedFlush, nil)
		_, skip, _ := f.exactlyOnce(plan, id, 0x5000, slot, nil, tr, &fakeTxnSink{}, cp, true)
		if skip != nil {
			t.Fatalf("skipper up to %s: want none (the checkpoint is not used)", skip.upTo)
		}
		if n := refusedCount(t, f, refusedWentBack); n != 1 {
			t.Errorf("walpost_checkpoint_refused_total{reason=went_back} = %v, want 1", n)
		}
	})
	t.Run("the checkpoint is past the server's WAL", func(t *testing.T) {
		f, _ := eosForwarder()
		tr := checkpoint.New(slot.ConfirmedFlush, nil)
		_, skip, _ := f.exactlyOnce(plan, id, 0x600, slot, nil, tr, &fakeTxnSink{}, cp, true)
		if skip != nil {
			t.Fatalf("skipper up to %s: want none", skip.upTo)
		}
		if n := refusedCount(t, f, refusedAhead); n != 1 {
			t.Errorf("walpost_checkpoint_refused_total{reason=ahead_of_server} = %v, want 1", n)
		}
	})
	t.Run("a new process, the server's WAL past the checkpoint", func(t *testing.T) {
		f, _ := eosForwarder()
		tr := checkpoint.New(slot.ConfirmedFlush, nil)
		s := &fakeTxnSink{}
		h, _, tx := f.exactlyOnce(plan, id, 0x5000, slot, nil, tr, s, cp, true)
		confirmed := runWAL(t, h, tx, tr, s, restored)
		if confirmed > 0x100 {
			t.Errorf("the tracker confirmed %s past walpost_position 0/100 over transactions never produced", confirmed)
		}
		if err := tx.failure(); !errors.Is(err, errCheckpointMismatch) {
			t.Errorf("session error %v, want errCheckpointMismatch", err)
		}
		if n := refusedCount(t, f, refusedNotInWAL); n != 1 {
			t.Errorf("walpost_checkpoint_refused_total{reason=not_in_wal} = %v, want 1", n)
		}
		// The next session does not use it: everything is produced.
		tr = checkpoint.New(slot.ConfirmedFlush, nil)
		s = &fakeTxnSink{}
		h, skip, tx := f.exactlyOnce(plan, id, 0x5000, slot, nil, tr, s, cp, true)
		if skip != nil {
			t.Fatalf("next session skips up to %s: want nothing skipped", skip.upTo)
		}
		runWAL(t, h, tx, tr, s, restored)
		if got := tr.Confirmed(); got != 0xa00 || len(s.commits) != 4 {
			t.Errorf("next session: confirmed %s after %d commits, want 0/A00 after all 4 produced", got, len(s.commits))
		}
	})
	t.Run("the checkpoint matches: its transactions are skipped and confirmed", func(t *testing.T) {
		f, _ := eosForwarder()
		tr := checkpoint.New(slot.ConfirmedFlush, nil)
		s := &fakeTxnSink{}
		same := append([]restoredTxn(nil), restored...)
		same[2].at = old
		h, _, tx := f.exactlyOnce(plan, id, 0x5000, slot, nil, tr, s, cp, true)
		runWAL(t, h, tx, tr, s, same[:3])
		if got := tr.Confirmed(); got != 0x100 {
			t.Errorf("before the stream passed the checkpoint: confirmed %s, want held at 0/100", got)
		}
		runWAL(t, h, tx, tr, s, same[3:])
		if err := tx.failure(); err != nil {
			t.Fatal(err)
		}
		if got := tr.Confirmed(); got != 0xa00 || len(s.commits) != 1 {
			t.Errorf("confirmed %s after %d commits, want 0/A00 with only new-4 produced", got, len(s.commits))
		}
	})
	t.Run("a transaction between the anchor and the checkpoint", func(t *testing.T) {
		f, _ := eosForwarder()
		tr := checkpoint.New(slot.ConfirmedFlush, nil)
		s := &fakeTxnSink{}
		c := cp
		c.AnchorCommitLSN, c.AnchorCommitTime = 0x1d0, now
		h, _, tx := f.exactlyOnce(plan, id, 0x5000, slot, nil, tr, s, c, true)
		if confirmed := runWAL(t, h, tx, tr, s, restored); confirmed > 0x200 {
			t.Errorf("confirmed %s: want at most the anchor's transaction end 0/200", confirmed)
		}
		if err := tx.failure(); !errors.Is(err, errCheckpointMismatch) {
			t.Errorf("session error %v, want errCheckpointMismatch", err)
		}
	})
}

// TestCheckpointPartialOfAnotherTransaction: the partial transaction's
// commit time differs: its first events are not skipped.
func TestCheckpointPartialOfAnotherTransaction(t *testing.T) {
	f, _ := eosForwarder()
	id := position.Identity{SystemID: 7, Timeline: 1}
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	cp := kafka.TxnMark{Slot: "s", SystemID: 7, Timeline: 1, LSN: 0x100, Anchored: true, PartialCommitLSN: 0x1d0, PartialCommitTime: at, Ordinal: 2}
	slot := replication.SlotInfo{Exists: true, ConfirmedFlush: 0x100}
	tr := checkpoint.New(slot.ConfirmedFlush, nil)
	s := &fakeTxnSink{}
	h, _, tx := f.exactlyOnce(position.Plan{SkipTo: 0x100}, id, 0x5000, slot, nil, tr, s, cp, true)
	runWAL(t, h, tx, tr, s, []restoredTxn{{0x1d0, 0x200, at.Add(time.Minute), []string{"p1", "p2", "p3"}}})
	if err := tx.failure(); !errors.Is(err, errCheckpointMismatch) {
		t.Errorf("session error %v, want errCheckpointMismatch", err)
	}
	if got := tr.Confirmed(); got != 0x100 {
		t.Errorf("confirmed %s, want 0/100", got)
	}
}

// TestExactlyOnceCountsTimelineChanges: a session on another timeline
// than the stored position counts walpost_position_timeline_changed_total
// in exactly-once mode too. Before the fix only the at-least-once handler
// counted it.
func TestExactlyOnceCountsTimelineChanges(t *testing.T) {
	f, _ := eosForwarder()
	tr := checkpoint.New(0x100, nil)
	f.exactlyOnce(position.Plan{TimelineChanged: true, SwitchPoint: 0x500, SkipTo: 0x500}, position.Identity{SystemID: 7, Timeline: 3}, 0x5000,
		replication.SlotInfo{Exists: true, ConfirmedFlush: 0x100}, nil, tr, &fakeTxnSink{}, kafka.TxnMark{}, false)
	var m dto.Metric
	if err := f.m.timelineChanged.Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 1 {
		t.Errorf("walpost_position_timeline_changed_total = %v, want 1", got)
	}
}

// TestCheckpointVerifiedOnQuietOutbox: the WAL ends with the checkpoint's
// anchor transaction and only keepalives follow (a walpost killed after
// its Kafka commit and before the slot moved, restarted on a quiet
// outbox): the check decides once the handled events reach the checkpoint
// (anchorCheck.idle, called at each status update), so the hold ends and
// keepalives move the slot again.
func TestCheckpointVerifiedOnQuietOutbox(t *testing.T) {
	id := position.Identity{SystemID: 7, Timeline: 1}
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	cp := kafka.TxnMark{Slot: "s", SystemID: 7, Timeline: 1, LSN: 0x900, Anchored: true, AnchorCommitLSN: 0x8d0, AnchorCommitTime: at}
	slot := replication.SlotInfo{Exists: true, ConfirmedFlush: 0x100}
	f, _ := eosForwarder()
	tr := checkpoint.New(slot.ConfirmedFlush, nil)
	s := &fakeTxnSink{}
	h, skip, tx := f.exactlyOnce(position.Plan{SkipTo: 0x100}, id, 0x5000, slot, nil, tr, s, cp, true)
	runWAL(t, h, tx, tr, s, []restoredTxn{{0x1d0, 0x200, at.Add(-time.Minute), []string{"a"}}, {0x8d0, 0x900, at, []string{"b"}}})
	tr.Idle(0x5000)
	if got := tr.Confirmed(); got != 0x100 {
		t.Fatalf("before the check decided: confirmed %s, want held at 0/100", got)
	}
	skip.verify.idle()
	if err := tx.failure(); err != nil {
		t.Fatal(err)
	}
	if got := tr.Confirmed(); got != 0x5000 {
		t.Errorf("confirmed %s after the check on a quiet outbox, want the keepalive's 0/5000", got)
	}
	// Refuted the same way when the anchor never came.
	f, _ = eosForwarder()
	tr = checkpoint.New(slot.ConfirmedFlush, nil)
	h, skip, tx = f.exactlyOnce(position.Plan{SkipTo: 0x100}, id, 0x5000, slot, nil, tr, s, cp, true)
	runWAL(t, h, tx, tr, s, []restoredTxn{{0x1d0, 0x200, at.Add(-time.Minute), []string{"a"}}})
	tr.Idle(0x5000)
	skip.verify.idle()
	if err := tx.failure(); !errors.Is(err, errCheckpointMismatch) {
		t.Errorf("anchor never seen: session error %v, want errCheckpointMismatch", err)
	}
	if got := tr.Confirmed(); got != 0x100 {
		t.Errorf("anchor never seen: confirmed %s, want 0/100", got)
	}
}

// TestRestoreActedOnOnce: once a session found walpost_position behind
// what this process wrote (the database was restored) and acted on it,
// the next sessions compare with the restored row: the checkpoint is not
// refused again for it, and the row is not raised to the old position.
func TestRestoreActedOnOnce(t *testing.T) {
	f, _ := eosForwarder()
	id := position.Identity{SystemID: 7, Timeline: 1}
	f.saved = position.Row{Slot: "s", Identity: id, LSN: 0x9000}
	f.known = f.saved
	restored := position.Row{Slot: "s", Identity: id, LSN: 0x1000}
	if _, _, wentBack := raiseToKnown(restored, true, f.known, f.saved); !wentBack {
		t.Fatal("the restored row is not seen as gone back")
	}
	f.restoredTo(restored)
	later := position.Row{Slot: "s", Identity: id, LSN: 0x2000}
	raised, ok, wentBack := raiseToKnown(later, true, f.known, f.saved)
	if wentBack || ok || raised.LSN != 0x2000 {
		t.Errorf("next session: raised %s ok=%v wentBack=%v; want the stored 0/2000 as it is", raised.LSN, ok, wentBack)
	}
}
