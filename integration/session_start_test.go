package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/verify"
)

// TestFirstStatusNeverBehindSlot: the slot is confirmed further by another
// process (a standby walpost) after walpost read it and before
// START_REPLICATION. With an event in flight, so no keepalive moves the
// watermark, the first status update must not carry the older position,
// and the slot must not move back. PostgreSQL 15 sends a keepalive at the
// start position before any data, which moves an idle watermark forward
// by itself; TestFirstStatusNotBehindSlotReadAfterStart (replication)
// covers a server that does not.
func TestFirstStatusNeverBehindSlot(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	side, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer side.Close(context.Background())
	rcfg := replication.Config{Slot: f.Slot, Publication: f.Publication, Table: f.Table, StatusInterval: time.Second}
	table, slot, err := replication.Prepare(ctx, side, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	read := slot.ConfirmedFlush
	budget := checkpoint.NewBudget(checkpoint.Limits{MaxEvents: 100})
	tracker := checkpoint.New(read, budget)

	// Between the read and the start, the slot moves past an event.
	mustExec(t, f.Pool, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES ('before', '{}')`, f.Table))
	mustExec(t, f.Pool, `SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())`, f.Slot)
	ahead, _, _ := f.slotState()
	if ahead <= read {
		t.Fatalf("slot at %s after pg_replication_slot_advance, want past %s", ahead, read)
	}
	// The event the stream will receive and hold unacknowledged.
	mustExec(t, f.Pool, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES ('after', '{}')`, f.Table))

	rcfg.SlotConfirmed = func(ctx context.Context) (pglogrepl.LSN, error) {
		s, err := replication.ReadSlot(ctx, side, f.Slot)
		return s.ConfirmedFlush, err
	}
	conn, err := replication.ConnectReplication(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())

	var mu sync.Mutex
	var held []checkpoint.Ticket
	var keys []string
	var statuses []pglogrepl.LSN
	firstStatus := make(chan struct{})
	emit := func(ev *outbox.Event, tk checkpoint.Ticket) {
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, ev.IdempotencyKey)
		held = append(held, tk)
	}
	obs := replication.Observer{Status: func(_, confirmed pglogrepl.LSN) {
		mu.Lock()
		defer mu.Unlock()
		statuses = append(statuses, confirmed)
		if len(statuses) == 1 {
			close(firstStatus)
		}
	}}
	st := replication.NewStream(rcfg, conn, table, replication.Flow{Frontier: tracker, Budget: budget}, replication.HandlerFuncs{EmitFunc: emit}, obs)
	sctx, scancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- st.Run(sctx) }()
	stop := sync.OnceValue(func() error { scancel(); return <-done })
	defer stop()

	select {
	case <-firstStatus:
	case err := <-done:
		t.Fatalf("stream ended before its first status update: %v", err)
	case <-ctx.Done():
		t.Fatal("no status update within the deadline")
	}
	mu.Lock()
	first := statuses[0]
	mu.Unlock()
	if first < ahead {
		t.Errorf("first status update confirmed %s, behind the slot's %s (walpost read %s before START_REPLICATION): it moves a standby's confirmation back", first, ahead, read)
	}
	if lsn, _, _ := f.slotState(); lsn < ahead {
		t.Errorf("slot moved back from %s to %s by the first status update", ahead, lsn)
	}

	// The held event is the one after the advance; once acked, the
	// watermark moves past it.
	waitFor(t, 30*time.Second, "the event after the advance", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(keys) > 0
	})
	mu.Lock()
	if len(keys) != 1 || keys[0] != "after" {
		t.Errorf("received %v, want only the event written after the slot moved", keys)
	}
	for _, tk := range held {
		tracker.Done(tk)
	}
	mu.Unlock()
	waitFor(t, 30*time.Second, "the slot confirmed past the held event", func() bool {
		lsn, _, _ := f.slotState()
		return lsn > ahead
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, c := range statuses {
		if c < ahead {
			t.Errorf("status update %d confirmed %s, behind the slot's %s", i, c, ahead)
		}
	}
}

// TestReceiveTimeoutAboveWalSenderTimeout: with wal_sender_timeout = 90s
// the server replaying a large unrelated transaction reads no status
// updates and sends nothing for up to 45 s. A walpost configured with a
// 2 s receive timeout must keep its session through such a replay (its
// effective timeout is kept above wal_sender_timeout, and logged) and
// deliver the event written after it, instead of reconnecting into the
// same replay forever.
func TestReceiveTimeoutAboveWalSenderTimeout(t *testing.T) {
	t.Parallel()
	f := ownFixture(t, 1)
	setWalSenderTimeout(t, f, "90s")
	big := "unrelated_" + f.Table
	mustExec(t, f.Pool, fmt.Sprintf(`CREATE TABLE %s (id int)`, big))
	t.Cleanup(func() { _, _ = f.Pool.Exec(context.Background(), fmt.Sprintf(`DROP TABLE IF EXISTS %s`, big)) })

	p := f.start("WALPOST_POSTGRES_STATUS_INTERVAL=500ms", "WALPOST_POSTGRES_RECEIVE_TIMEOUT=2s")
	waitStreaming(t, p)
	if !p.waitLog("receive_timeout=1m40s", 30*time.Second) {
		t.Fatalf("walpost did not log its receive timeout raised to wal_sender_timeout + 10s (1m40s):\n%s", tail(p.log, 30))
	}
	// Decoding this transaction's commit replays every row to pgoutput,
	// which filters them all out: seconds without a message.
	mustExec(t, f.Pool, fmt.Sprintf(`INSERT INTO %s SELECT generate_series(1, 3000000)`, big))
	probe := fmt.Sprintf("probe-%d", time.Now().UnixNano())
	if _, err := f.writeTxn(context.Background(), probe, []string{probe}, `{"probe": true}`); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	arrived := false
	for !arrived && time.Now().Before(deadline) {
		alive(t, p, "during the replay")
		if n := logCount(p, "presumed dead"); n > 0 {
			t.Fatalf("walpost gave up on a live session %d time(s) while the server replayed an unrelated transaction:\n%s", n, tail(p.log, 20))
		}
		for _, o := range consumeExpected(t, f, []verify.Expected{{Key: probe}}, 5*time.Second) {
			arrived = arrived || o.Key == probe
		}
	}
	if !arrived {
		t.Fatalf("the event written after the unrelated transaction did not arrive within 2 minutes (sessions started %d)", logCount(p, "msg=streaming"))
	}
	if n := logCount(p, "session failed"); n > 0 {
		t.Errorf("%d session(s) failed during the replay:\n%s", n, tail(p.log, 20))
	}
}
