package forwarder

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/kafkaconf"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/replication/replicationtest"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// The session harness runs a whole Forwarder in-process: PostgreSQL is a
// replicationtest.Server (the walsender and the catalog) whose own tables
// (walpost_position, the poison table) are a fakeDB, and Kafka is kfake or
// a scripted sink. Every wait is on a condition, bounded by the test's
// context.

// harnessTopic is the default topic of harness sessions.
const harnessTopic = "outbox"

// sessionHarness is one Forwarder over a fake PostgreSQL.
type sessionHarness struct {
	t   *testing.T
	ctx context.Context // ends with the test (30 s at most)
	pg  *replicationtest.Server
	db  *fakeDB
	cfg *config.Config
	f   *Forwarder

	// retryFirst is the Forwarder's first wait between sessions (0: 1 s).
	retryFirst time.Duration

	stop   context.CancelFunc
	done   chan error    // Run's result
	exited chan struct{} // closed when Run returned
}

// newSessionHarness prepares a forwarder over a fake PostgreSQL; edit changes the
// configuration before New.
func newSessionHarness(t *testing.T, pgcfg replicationtest.Config, edit func(*config.Config)) *sessionHarness {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	db := &fakeDB{}
	pgcfg.Query = db.query
	pg := replicationtest.NewServer(t, pgcfg)
	cfg, err := config.Load(nil, config.NeedNothing)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Postgres.URL = pg.URL()
	cfg.Postgres.StatusInterval = 200 * time.Millisecond
	cfg.Postgres.PositionInterval = 100 * time.Millisecond
	cfg.HTTP.Listen = ""
	cfg.Kafka.Brokers = []string{"127.0.0.1:1"} // no Kafka unless edit sets one
	cfg.Kafka.Topic = harnessTopic
	cfg.Kafka.Compression = "none"
	cfg.Kafka.FlushTimeout = 5 * time.Second
	if edit != nil {
		edit(cfg)
	}
	return &sessionHarness{t: t, ctx: ctx, pg: pg, db: db, cfg: cfg}
}

// run starts Run on a Forwarder with deps; the test's cleanup stops it.
func (h *sessionHarness) run(deps Deps) {
	h.t.Helper()
	f, err := New(h.cfg, deps)
	if err != nil {
		h.t.Fatal(err)
	}
	h.f = f
	f.retryFirst = h.retryFirst
	ctx, stop := context.WithCancel(context.Background())
	// A later run replaces these; the cleanup waits for this one's.
	done, exited := make(chan error, 1), make(chan struct{})
	h.stop, h.done, h.exited = stop, done, exited
	go func() {
		done <- f.Run(ctx)
		close(exited)
		h.pg.SetSlot(func(*replicationtest.Slot) {}) // wakes a Wait on the server
	}()
	h.t.Cleanup(func() {
		stop()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			h.t.Error("Run did not return within 30s of its context's end")
		}
	})
}

// result waits for Run's result.
func (h *sessionHarness) result() error {
	h.t.Helper()
	select {
	case err := <-h.done:
		h.done <- err // for the cleanup
		return err
	case <-h.ctx.Done():
		h.t.Fatal("Run did not return")
		return nil
	}
}

// waitExit waits at most d for Run to return and returns its result.
func (h *sessionHarness) waitExit(d time.Duration) error {
	h.t.Helper()
	select {
	case <-h.exited:
		return h.result()
	case <-time.After(d):
		h.t.Fatalf("Run still running %s later (START_REPLICATIONs %d, slot %+v)", d, h.pg.Starts(), h.pg.Slot())
		return nil
	}
}

// waitFlush waits for a status update confirming lsn.
func (h *sessionHarness) waitFlush(lsn pglogrepl.LSN) replicationtest.Status {
	h.t.Helper()
	st, err := h.pg.WaitFlush(h.ctx, lsn)
	if err != nil {
		h.t.Fatalf("%v (confirmed at most %s)", err, h.pg.MaxFlush())
	}
	return st
}

// kafkaFake is a one-broker kfake cluster with the default topic (the
// checkpoint topic is left to kafka.create_topic_partitions), closed with
// the test, that counts the records of
// every produce request by key (also records of aborted transactions and
// checkpoints; requests name topics by id).
type kafkaFake struct {
	*kfake.Cluster
	mu       sync.Mutex
	changed  chan struct{}
	produced map[string]int
}

func newKafkaFake(t *testing.T) *kafkaFake {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, harnessTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	k := &kafkaFake{Cluster: c, changed: make(chan struct{}), produced: map[string]int{}}
	c.ControlKey(int16(kmsg.Produce), k.count)
	return k
}

// count sees every produce request and lets the broker answer it.
func (k *kafkaFake) count(kreq kmsg.Request) (kmsg.Response, error, bool) {
	recs := producedRecords(kreq.(*kmsg.ProduceRequest))
	if len(recs) == 0 {
		return nil, nil, false
	}
	k.mu.Lock()
	for _, r := range recs {
		k.produced[string(r.Key)]++
	}
	close(k.changed)
	k.changed = make(chan struct{})
	k.mu.Unlock()
	return nil, nil, false
}

// times is how many produce requests carried the record with key.
func (k *kafkaFake) times(key string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.produced[key]
}

// keys are the keys of the default topic produced so far, with counts.
func (k *kafkaFake) keys() map[string]int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return maps.Clone(k.produced)
}

// exactlyOnce configures delivery.mode exactly-once on k: walpost
// creates the checkpoint topic, and commits a Kafka transaction every
// 100 ms.
func exactlyOnce(k *kafkaFake) func(*config.Config) {
	return func(cfg *config.Config) {
		cfg.Kafka.Brokers = k.ListenAddrs()
		cfg.Kafka.CreateTopicPartitions = 1
		cfg.Delivery.Mode = config.ExactlyOnce
		cfg.Delivery.TransactionInterval = 100 * time.Millisecond
	}
}

// transactional is a second producer of the harness slot's transactional
// id, as another walpost of the slot builds it (openTxn), initialised:
// it fences the producer of a running session.
func (h *sessionHarness) transactional() *kafka.Sink {
	h.t.Helper()
	kcfg, err := kafkaconf.ConfigFrom(h.cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	kcfg.TransactionalID = kafka.TransactionalID(h.cfg.Postgres.Slot, 7)
	kcfg.TransactionTimeout = h.cfg.Delivery.TransactionTimeout
	kcfg.CheckpointTopic = h.cfg.Kafka.CheckpointTopic
	k, err := kafka.New(kcfg)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(k.Close)
	if err := k.InitProducer(h.ctx); err != nil {
		h.t.Fatal(err)
	}
	return k
}

// checkpointTopic creates the harness's checkpoint topic, as walpost
// does at its first exactly-once start.
func (h *sessionHarness) checkpointTopic() {
	h.t.Helper()
	cl, err := kafkaconf.NewClient(h.cfg.Kafka)
	if err != nil {
		h.t.Fatal(err)
	}
	_, err = kafka.EnsureCheckpointTopic(h.ctx, cl, h.cfg.Kafka.CheckpointTopic, true)
	cl.Close()
	if err != nil {
		h.t.Fatal(err)
	}
}

// commitCheckpoint commits, through w (transactional), the checkpoint of
// a walpost that delivered everything up to last's end: last is its
// anchor. Safe to call off the test's goroutine.
func (h *sessionHarness) commitCheckpoint(w *kafka.Sink, last replicationtest.Txn) error {
	if err := w.BeginTxn(); err != nil {
		return err
	}
	return w.CommitTxn(h.ctx, kafka.TxnMark{Slot: h.cfg.Postgres.Slot, SystemID: 7, Timeline: 1, LSN: last.End,
		Anchored: true, AnchorCommitLSN: last.Commit, AnchorCommitTime: last.Time})
}

// fakeDB is walpost's own tables on the fake server: walpost_position
// (one row per slot, Save's rules: never backwards on a timeline, never
// over another system's row) and a poison table that accepts the check
// and holds nothing.
type fakeDB struct {
	mu  sync.Mutex
	row *position.Row
}

var (
	reSavePosition = regexp.MustCompile(`(?s)INSERT INTO walpost_position AS p .*VALUES \(\s*'([^']*)'\s*,\s*'?(-?\d+)'?\s*,\s*'?(-?\d+)'?\s*,\s*'([^']*)'\s*::pg_lsn`)
	poisonColumns  = []string{"idempotency_key", "outbox_id", "payload", "created_at", "topic", "partition_key", "event_type", "headers",
		"attempts", "last_error", "error_class", "commit_lsn", "poisoned_at", "replayed_at", "replay_count"}
	poisonTypes = map[string]string{"outbox_id": "uuid", "payload": "jsonb", "headers": "jsonb", "created_at": "timestamp with time zone",
		"poisoned_at": "timestamp with time zone", "replayed_at": "timestamp with time zone", "attempts": "integer", "replay_count": "integer", "commit_lsn": "pg_lsn"}
)

func (d *fakeDB) query(q string) (*replicationtest.Result, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case regexp.MustCompile(`FROM walpost_position p WHERE slot =`).MatchString(q):
		r := replicationtest.Rows([]replicationtest.Col{{Name: "slot", OID: pgtype.TextOID}, {Name: "system_identifier", OID: pgtype.Int8OID},
			{Name: "timeline", OID: pgtype.Int4OID}, {Name: "confirmed_lsn", OID: pgtype.TextOID}, {Name: "last_commit_at", OID: pgtype.TimestamptzOID},
			{Name: "updated_at", OID: pgtype.TimestamptzOID}, {Name: "recovering_since", OID: pgtype.TimestamptzOID},
			{Name: "snapshot", OID: pgtype.TextOID}, {Name: "snapshot_lsn", OID: pgtype.TextOID}, {Name: "next_snapshot", OID: pgtype.TextOID}, {Name: "next_snapshot_lsn", OID: pgtype.TextOID}})
		if d.row != nil {
			r.Add(d.row.Slot, d.row.SystemID, d.row.Timeline, d.row.LSN, nil, time.Now(), nil, nil, nil, nil, nil)
		}
		return r, nil
	case q == `SELECT pg_current_snapshot()::text`:
		return replicationtest.Rows([]replicationtest.Col{{Name: "s", OID: pgtype.TextOID}}, []any{"1000:1000:"}), nil
	case q == `SELECT pg_current_wal_insert_lsn()::text`:
		return replicationtest.Rows([]replicationtest.Col{{Name: "l", OID: pgtype.TextOID}}, []any{"0/0"}), nil
	case reSavePosition.MatchString(q):
		m := reSavePosition.FindStringSubmatch(q)
		sys, _ := strconv.ParseInt(m[2], 10, 64)
		tl, _ := strconv.ParseInt(m[3], 10, 32)
		lsn, err := pglogrepl.ParseLSN(m[4])
		if err != nil {
			return nil, err
		}
		r := position.Row{Slot: m[1], Identity: position.Identity{SystemID: sys, Timeline: int32(tl)}, LSN: lsn}
		if d.row == nil || (d.row.SystemID == sys && (d.row.LSN < lsn || d.row.Timeline != r.Timeline)) {
			d.row = &r
			return replicationtest.Tag("INSERT 0 1"), nil
		}
		return replicationtest.Tag("INSERT 0 0"), nil
	case regexp.MustCompile(`^SELECT coalesce\(to_regclass\(`).MatchString(q):
		return replicationtest.Rows([]replicationtest.Col{{Name: "oid", OID: pgtype.OIDOID}}, []any{16500}), nil
	case regexp.MustCompile(`^SELECT attname, format_type\(atttypid, NULL\) FROM pg_attribute`).MatchString(q):
		r := replicationtest.Rows([]replicationtest.Col{{Name: "attname", OID: pgtype.TextOID}, {Name: "format_type", OID: pgtype.TextOID}})
		for _, c := range poisonColumns {
			typ := poisonTypes[c]
			if typ == "" {
				typ = "text"
			}
			r.Add(c, typ)
		}
		return r, nil
	case regexp.MustCompile(`FROM pg_index i JOIN pg_class c`).MatchString(q):
		return replicationtest.Rows([]replicationtest.Col{{Name: "relname", OID: pgtype.TextOID}, {Name: "cols", OID: pgtype.TextArrayOID}},
			[]any{"poison_outbox_pkey", []string{"commit_lsn", "outbox_id"}}), nil
	case regexp.MustCompile(`FROM "?poison_outbox"?\s+WHERE poisoned_at >`).MatchString(q):
		return replicationtest.Rows([]replicationtest.Col{{Name: "age", OID: pgtype.Float8OID}}), nil
	}
	return nil, nil
}

// position is the stored row of walpost_position (nil: none).
func (d *fakeDB) position() *position.Row {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.row == nil {
		return nil
	}
	r := *d.row
	return &r
}

// setPosition stores r as walpost_position's row.
func (d *fakeDB) setPosition(r position.Row) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.row = &r
}

// heldSink is a scripted sink: it keeps every event and acknowledges one
// only when the test says so (ack), in any order.
type heldSink struct {
	mu      sync.Mutex
	changed chan struct{}
	events  []*heldEvent
}

type heldEvent struct {
	ev    *outbox.Event
	a     sink.Acker
	acked bool
}

func newHeldSink() *heldSink { return &heldSink{changed: make(chan struct{})} }

func (s *heldSink) Produce(ev *outbox.Event, a sink.Acker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, &heldEvent{ev: ev, a: a})
	close(s.changed)
	s.changed = make(chan struct{})
}

// Flush waits until every event produced has been acknowledged.
func (s *heldSink) Flush(ctx context.Context) error {
	return s.wait(ctx, func() bool {
		for _, e := range s.events {
			if !e.acked {
				return false
			}
		}
		return true
	})
}

func (s *heldSink) Close() {}

// wait waits, with s.mu held while cond runs, until cond holds.
func (s *heldSink) wait(ctx context.Context, cond func() bool) error {
	for {
		s.mu.Lock()
		ok, ch := cond(), s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// waitProduced waits until n events were produced.
func (s *heldSink) waitProduced(ctx context.Context, t *testing.T, n int) {
	t.Helper()
	if err := s.wait(ctx, func() bool { return len(s.events) >= n }); err != nil {
		t.Fatalf("waiting for %d events produced: %v", n, err)
	}
}

// ack acknowledges the produced event with the idempotency key key.
func (s *heldSink) ack(t *testing.T, key string) {
	t.Helper()
	s.mu.Lock()
	var e *heldEvent
	for _, x := range s.events {
		if x.ev.IdempotencyKey == key && !x.acked {
			e = x
		}
	}
	if e == nil {
		s.mu.Unlock()
		t.Fatalf("no unacknowledged event %q produced", key)
	}
	e.acked = true
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	e.a.Acked(sink.Result{Topic: harnessTopic, Partition: 0, Offset: 0}, nil)
}

// row is an outbox row whose id and idempotency key are key.
func row(n int) []replicationtest.Value {
	return replicationtest.Row(fmt.Sprintf("00000000-0000-0000-0000-%012d", n), fmt.Sprintf("k%d", n), `{}`)
}
