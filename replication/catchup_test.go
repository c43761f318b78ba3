package replication

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/replication/replicationtest"
)

// TestFirstStatusNotBehindSlotReadAfterStart: the tracker starts at the
// slot position read before START_REPLICATION; the slot was confirmed
// further by another process in between. A server that sends a
// transaction before any keepalive (so no idle advance catches up), whose
// event stays in flight, must still get a first status update at or past
// the slot's position re-read after the start, never the older one.
func TestFirstStatusNotBehindSlotReadAfterStart(t *testing.T) {
	const read, ahead = pglogrepl.LSN(0x1000), pglogrepl.LSN(0x2000)
	srv := replicationtest.NewServer(t, replicationtest.Config{Start: ahead})
	srv.Append(replicationtest.Row("id", "k", "{}"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := ConnectReplication(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())

	tracker := checkpoint.New(read, nil)
	var held []checkpoint.Ticket
	cfg := Config{
		Slot: "walpost", Publication: "walpost_outbox", StatusInterval: 100 * time.Millisecond, DrainTimeout: 100 * time.Millisecond,
		SlotConfirmed: func(context.Context) (pglogrepl.LSN, error) { return ahead, nil },
	}
	st := NewStream(cfg, conn, TableName{Schema: "public", Name: "outbox"}, Flow{Frontier: tracker},
		HandlerFuncs{EmitFunc: func(_ *outbox.Event, k checkpoint.Ticket) { held = append(held, k) }}, Observer{})
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- st.Run(sctx) }()
	defer func() { stop(); <-done }()

	if err := srv.Wait(ctx, "a status update", func() bool { return len(srv.Statuses()) > 0 }); err != nil {
		t.Fatal(err)
	}
	if flush := srv.Statuses()[0].Flush; flush < ahead {
		t.Fatalf("first status update flushes %s: behind the slot's %s re-read after START_REPLICATION (the tracker started at %s)", flush, ahead, read)
	}
}
