package replication

import (
	"context"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/outbox"
)

// xlog wraps a pgoutput message in XLogData at lsn.
func xlog(lsn pglogrepl.LSN, msg []byte) []byte {
	w := wire{'w'}.u64(uint64(lsn)).u64(uint64(lsn)).u64(0)
	return append(w, msg...)
}

// TestFirstStatusNotBehindSlotReadAfterStart: the tracker starts at the
// slot position read before START_REPLICATION; the slot was confirmed
// further by another process in between. A server that sends a
// transaction before any keepalive (so no idle advance catches up), whose
// event stays in flight, must still get a first status update at or past
// the slot's position re-read after the start, never the older one.
func TestFirstStatusNotBehindSlotReadAfterStart(t *testing.T) {
	const read, ahead = pglogrepl.LSN(0x1000), pglogrepl.LSN(0x2000)
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	pcfg, err := pgconn.ParseConfig("postgres://walpost@127.0.0.1/walpost")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgconn.Construct(&pgconn.HijackedConn{
		Conn: client, TxStatus: 'I', ParameterStatuses: map[string]string{}, Config: pcfg, CustomData: map[string]any{},
	})
	if err != nil {
		t.Fatal(err)
	}
	flushes := make(chan pglogrepl.LSN, 16)
	srvErr := make(chan error, 1)
	go func() {
		be := pgproto3.NewBackend(server, server)
		if _, err := be.Receive(); err != nil { // START_REPLICATION
			srvErr <- err
			return
		}
		be.Send(&pgproto3.CopyBothResponse{})
		var cols []relCol
		for _, n := range []string{"id", "idempotency_key", "payload", "created_at"} {
			cols = append(cols, relCol{name: n, oid: 25})
		}
		commit := time.Unix(1700000000, 0)
		for _, m := range [][]byte{
			xlog(ahead+0x10, msgBegin(ahead+0x40, commit, 9)),
			xlog(ahead+0x10, msgRelation(16394, "public", "outbox", cols)),
			xlog(ahead+0x20, msgInsert(16394, []tupleCol{text("id"), text("k"), text("{}"), text("2026-01-01 00:00:00+00")})),
		} {
			be.Send(&pgproto3.CopyData{Data: m})
		}
		if err := be.Flush(); err != nil {
			srvErr <- err
			return
		}
		for {
			msg, err := be.Receive()
			if err != nil {
				srvErr <- err
				return
			}
			if cd, ok := msg.(*pgproto3.CopyData); ok && len(cd.Data) >= 17 && cd.Data[0] == 'r' {
				flushes <- pglogrepl.LSN(binary.BigEndian.Uint64(cd.Data[9:17]))
			}
		}
	}()

	tracker := checkpoint.New(read, checkpoint.Limits{})
	var held []checkpoint.Ticket
	cfg := Config{
		Slot: "s", Publication: "p", StatusInterval: 100 * time.Millisecond, DrainTimeout: 100 * time.Millisecond,
		SlotConfirmed: func(context.Context) (pglogrepl.LSN, error) { return ahead, nil },
	}
	st := NewStream(cfg, conn, TableName{Schema: "public", Name: "outbox"}, tracker,
		HandlerFuncs{EmitFunc: func(_ *outbox.Event, k checkpoint.Ticket) { held = append(held, k) }}, Observer{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	defer func() { cancel(); server.Close(); <-done }()

	select {
	case flush := <-flushes:
		if flush < ahead {
			t.Fatalf("first status update flushes %s: behind the slot's %s re-read after START_REPLICATION (the tracker started at %s)", flush, ahead, read)
		}
	case err := <-srvErr:
		t.Fatalf("fake server: %v", err)
	case err := <-done:
		t.Fatalf("stream ended before its first status update: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no status update within 30s")
	}
}
