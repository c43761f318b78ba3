package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// TestDecodeFromRealSlot decodes outbox inserts from a real logical slot.
func TestDecodeFromRealSlot(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	side, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer side.Close(ctx)
	rcfg := replication.Config{Slot: f.Slot, Publication: f.Publication, Table: f.Table, StatusInterval: time.Second}
	table, slot, err := replication.Prepare(ctx, side, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, f.Pool, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload, topic, partition_key, event_type, headers)
		VALUES ('k-1', '{"b": [1, 2], "a": "x"}', 'orders', 'customer-7', 'order.created', '{"trace": "t1"}'),
		       ('k-2', '{}', NULL, NULL, NULL, NULL)`, f.Table))
	conn, err := replication.ConnectReplication(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	budget := checkpoint.NewBudget(checkpoint.Limits{MaxEvents: 100})
	tracker := checkpoint.New(slot.ConfirmedFlush, budget)
	var mu sync.Mutex
	var got []*outbox.Event
	sctx, scancel := context.WithCancel(ctx)
	emit := func(ev *outbox.Event, tk checkpoint.Ticket) {
		mu.Lock()
		got = append(got, ev)
		n := len(got)
		mu.Unlock()
		tracker.Done(tk)
		if n == 2 {
			// Stop once the transaction's commit has been received.
			go func() {
				for tracker.Confirmed() <= ev.CommitLSN {
					time.Sleep(10 * time.Millisecond)
				}
				scancel()
			}()
		}
	}
	st := replication.NewStream(rcfg, conn, table, replication.Flow{Frontier: tracker, Budget: budget}, replication.HandlerFuncs{EmitFunc: emit}, replication.Observer{})
	if err := st.Run(sctx); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d events, want 2", len(got))
	}
	e := got[0]
	if e.IdempotencyKey != "k-1" || string(e.Payload) != `{"a": "x", "b": [1, 2]}` || e.Topic != "orders" ||
		!e.HasPartition || e.PartitionKey != "customer-7" || e.EventType != "order.created" || string(e.Headers) != `{"trace": "t1"}` {
		t.Fatalf("first event = %+v", e)
	}
	if e.CommitLSN == 0 || e.CommitTime.IsZero() || e.ID == "" || e.CreatedAt == "" || e.Seq != 0 {
		t.Fatalf("first event lacks transaction fields: %+v", e)
	}
	if g := got[1]; g.IdempotencyKey != "k-2" || g.Topic != "" || g.HasPartition || g.Headers != nil || g.Seq != 1 || g.CommitLSN != e.CommitLSN {
		t.Fatalf("second event = %+v", g)
	}
	// The final status update confirmed the transaction's end.
	if lsn, _, _ := f.slotState(); lsn <= e.CommitLSN {
		t.Fatalf("slot confirmed %s, want past commit %s", lsn, e.CommitLSN)
	}
}

// TestProduceConsumeRealBroker produces through kafka.Sink and reads the
// record back from the real broker.
func TestProduceConsumeRealBroker(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 3})
	k, err := kafka.New(kafka.Config{Brokers: brokers, DefaultTopic: f.Topic})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	commit := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	ev := &outbox.Event{ID: "00000000-0000-0000-0000-000000000001", IdempotencyKey: "key-1", Payload: []byte(`{"x": 1}`),
		CreatedAt: "2026-11-29 12:00:00.5+00", EventType: "thing.done", Headers: []byte(`{"h": "v"}`), CommitLSN: 0x16B3748, CommitTime: commit}
	if err := sink.ProduceSync(t.Context(), k, ev); err != nil {
		t.Fatal(err)
	}
	recs := f.consumeAll(t, 1, 30*time.Second)
	if len(recs) != 1 {
		t.Fatalf("consumed %d records, want 1", len(recs))
	}
	r := recs[0]
	want := map[string]string{"idempotency_key": "key-1", "outbox_id": ev.ID, "commit_lsn": "0/16B3748",
		"created_at": "2026-11-29T12:00:00.5Z", "event_type": "thing.done", "h": "v"}
	for k, v := range want {
		if r.Headers[k] != v {
			t.Errorf("header %s = %q, want %q", k, r.Headers[k], v)
		}
	}
	if r.Key != "key-1" || string(r.Value) != `{"x": 1}` || !r.Time.Equal(commit) {
		t.Fatalf("record key %q value %q time %v", r.Key, r.Value, r.Time)
	}
}
