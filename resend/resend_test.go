package resend

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func cur(i int) Cursor {
	return Cursor{At: "2026-12-01 10:00:00+00", XID: int64(100 + i), CMin: 0, CTID: "(0,1)"}
}

// TestFrontierPrefix: the prefix ends before the first row not done,
// whatever order acknowledgements come in. (Mutation: advancing to the
// highest done row fails it.)
func TestFrontierPrefix(t *testing.T) {
	f := &frontier{}
	var seqs []int64
	for i := range 5 {
		seqs = append(seqs, f.add(cur(i), 10))
	}
	check := func(wantN int64, want *Cursor) {
		t.Helper()
		c, n, b := f.prefix()
		if n != wantN || b != 10*wantN || (want == nil) != (c == nil) || (want != nil && *c != *want) {
			t.Fatalf("prefix = %v, %d, %d; want %v, %d", c, n, b, want, wantN)
		}
	}
	check(0, nil)
	f.done(seqs[2])
	f.done(seqs[4])
	check(0, nil)
	f.done(seqs[0])
	c0 := cur(0)
	check(1, &c0)
	f.done(seqs[1])
	c2 := cur(2)
	check(3, &c2)
	f.done(seqs[3])
	c4 := cur(4)
	check(5, &c4)
	// Rows added later continue the sequence.
	s := f.add(cur(5), 10)
	f.done(s)
	c5 := cur(5)
	check(6, &c5)
}

// TestFrontierCompacts: many rows through the frontier keep it correct
// across the compaction of its queue.
func TestFrontierCompacts(t *testing.T) {
	f := &frontier{}
	var pending []int64
	for i := range 5000 {
		pending = append(pending, f.add(cur(i), 1))
		if len(pending) == 3 {
			// Acknowledge out of order: last, first, middle.
			f.done(pending[2])
			f.done(pending[0])
			f.done(pending[1])
			pending = pending[:0]
		}
	}
	for _, s := range pending {
		f.done(s)
	}
	c, n, _ := f.prefix()
	if n != 5000 || *c != cur(4999) {
		t.Fatalf("prefix = %v, %d; want row 4999, 5000", c, n)
	}
	if len(f.q) > 2048 {
		t.Errorf("queue holds %d slots after every row was done", len(f.q))
	}
}

// TestPacer: rows are spaced at the rate; an oversleep is made up, a
// stall only up to maxCredit worth of rows. (Mutations: no catch-up at
// all fails the oversleep case; unbounded catch-up the stall case.)
func TestPacer(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var slept []time.Duration
	over := time.Duration(0) // each sleep oversleeps this much
	p := newPacer(100)       // 10 ms apart
	p.now = func() time.Time { return now }
	p.sleep = func(_ context.Context, d time.Duration) error {
		slept = append(slept, d)
		now = now.Add(d + over)
		return nil
	}
	wait := func(n int) {
		for range n {
			if err := p.wait(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	wait(5)
	want := []time.Duration{10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond}
	if !slices.Equal(slept, want) {
		t.Fatalf("slept %v, want %v", slept, want)
	}
	// At 1000/s every sleep oversleeps 4 ms: the schedule still holds,
	// 1000 rows take 1 s (plus the last oversleep).
	fast := newPacer(1000)
	fast.now, fast.sleep = p.now, p.sleep
	over, slept = 4*time.Millisecond, nil
	start := now
	for range 1000 {
		_ = fast.wait(context.Background())
	}
	if el := now.Sub(start); el < time.Second-5*time.Millisecond || el > time.Second+20*time.Millisecond {
		t.Fatalf("1000 rows at 1000/s with oversleeping timers took %s", el)
	}
	// A stall of a second: only maxCredit (5 rows) go at once, then the
	// rate again.
	over = 0
	now = now.Add(time.Second)
	slept = nil
	wait(8)
	if len(slept) != 8-int(maxCredit/(10*time.Millisecond))-1 {
		t.Fatalf("after a stall slept %v: want the first %d rows at once", slept, maxCredit/(10*time.Millisecond)+1)
	}
	// No rate: never sleeps.
	q := newPacer(0)
	q.sleep = func(context.Context, time.Duration) error { t.Fatal("slept without a rate"); return nil }
	_ = q.wait(context.Background())
}

// TestPacerCancel: a canceled context ends the wait with its error.
// TestPacerPending: pending is the wait before the next row, so an open
// Kafka transaction is committed before a wait that would outlast its
// interval.
func TestPacerPending(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	p := newPacer(2) // 500 ms apart
	p.now = func() time.Time { return now }
	p.sleep = func(_ context.Context, d time.Duration) error { now = now.Add(d); return nil }
	if d := p.pending(); d != 0 {
		t.Fatalf("pending before the first row = %s, want 0", d)
	}
	_ = p.wait(context.Background())
	if d := p.pending(); d != 500*time.Millisecond {
		t.Fatalf("pending after a row = %s, want 500ms", d)
	}
	if d := newPacer(0).pending(); d != 0 {
		t.Fatalf("pending without a rate = %s, want 0", d)
	}
}

func TestPacerCancel(t *testing.T) {
	p := newPacer(0.001) // a row every 1000 s
	ctx, cancel := context.WithCancel(context.Background())
	_ = p.wait(ctx) // the first is due now
	cancel()
	if err := p.wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait = %v, want context.Canceled", err)
	}
}

// TestStateRoundTrip: the progress file is written atomically and read
// back; a missing file is ErrNoProgress, a garbled one names the flag.
func TestStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.json")
	if _, err := loadState(path); !errors.Is(err, ErrNoProgress) {
		t.Fatalf("loadState of a missing file = %v, want ErrNoProgress", err)
	}
	c := cur(3)
	st := &State{Version: stateVersion, Table: `"public"."outbox"`, By: ByCreatedAt,
		Selection: Selection{Since: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), Keys: []string{"a,b"}, Where: "event_type = 'x'"},
		Matched:   10, Produced: 4, Bytes: 400, Cursor: &c}
	if err := saveState(path, st); err != nil {
		t.Fatal(err)
	}
	got, err := loadState(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Table != st.Table || got.Produced != 4 || *got.Cursor != c || !got.Selection.Since.Equal(st.Selection.Since) ||
		!slices.Equal(got.Selection.Keys, st.Selection.Keys) || got.Selection.Where != st.Selection.Where || !got.Selection.Until.IsZero() {
		t.Errorf("read back %+v, want %+v", got, st)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("the directory holds %d files, want the progress file alone (no temporary left)", len(entries))
	}
	if err := os.WriteFile(path, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadState(path); err == nil || !strings.Contains(err.Error(), "--progress-file") {
		t.Errorf("loadState of a garbled file = %v, want one naming --progress-file", err)
	}
	if err := saveState(filepath.Join(dir, "missing", "p.json"), st); err == nil || !strings.Contains(err.Error(), "--progress-file") {
		t.Errorf("saveState into a missing directory = %v, want one naming --progress-file", err)
	}
}

// TestOptionsCheck: contradicting or malformed flags are refused naming
// the flag.
func TestOptionsCheck(t *testing.T) {
	w, _ := ParseWhere("true")
	since := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		o    Options
		want string
	}{
		{Options{ProgressFile: "p", MaxRate: -1}, "--max-rate"},
		{Options{ProgressFile: "p", MaxRate: 1e-10}, "--max-rate"},
		{Options{ProgressFile: "p", MaxRate: math.NaN()}, "--max-rate"},
		{Options{ProgressFile: "p", MaxRate: math.Inf(1)}, "--max-rate"},
		{Options{ProgressFile: "p", Since: since, Until: since}, "--until"},
		{Options{ProgressFile: "p", Topic: "a topic"}, "--topic"},
		{Options{ProgressFile: "p", Keys: []string{"k", ""}}, "--key"},
		{Options{ProgressFile: "p", Resume: true, Where: w}, "--resume"},
		{Options{ProgressFile: "p", Resume: true, Since: since}, "--resume"},
		{Options{}, "--progress-file"},
		{Options{DryRun: true, Resume: true}, "--progress-file"},
	}
	for _, tt := range tests {
		err := tt.o.Check()
		if err == nil || !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Check(%+v) = %v, want ErrRefused naming %s", tt.o, err, tt.want)
		}
	}
	for _, o := range []Options{
		{ProgressFile: "p"},
		{DryRun: true},
		{ProgressFile: "p", Resume: true, MaxRate: 10},
		{ProgressFile: "p", Since: since, Until: since.Add(time.Hour), Keys: []string{"a"}, Where: w, Topic: "re.drive-1"},
	} {
		if err := o.Check(); err != nil {
			t.Errorf("Check(%+v) = %v, want nil", o, err)
		}
	}
}

// TestQuerySQL: the selection's SQL: bounds, keys, the predicate in
// parentheses, the cursor as a row comparison over the order key, and
// the order (commit timestamp, else created_at).
func TestQuerySQL(t *testing.T) {
	w, _ := ParseWhere("event_type = 'order.created'")
	since := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	c := cur(1)
	q := query{table: replication.TableName{Schema: "public", Name: "outbox"}, cols: []string{"id", "idempotency_key", "payload", "created_at", "event_type"},
		commitTS: true, sel: Selection{Since: since, Keys: []string{"k1"}}, where: w, after: &c}
	sql, args := q.rowsSQL()
	for _, want := range []string{
		`COALESCE(pg_xact_commit_timestamp(xmin), created_at) >= $1::timestamptz`,
		`idempotency_key = ANY($2::text[])`,
		`(COALESCE(pg_xact_commit_timestamp(xmin), created_at), xmin::text::bigint, cmin::text::bigint, ctid) > ($3::timestamptz, $4::bigint, $5::bigint, $6::tid)`,
		`AND (event_type = 'order.created')`,
		`FROM "public"."outbox"`,
		`ORDER BY COALESCE(pg_xact_commit_timestamp(xmin), created_at), xmin::text::bigint, cmin::text::bigint, ctid`,
		`NULL::text, NULL::text, "event_type"::text, NULL::text`, // topic, partition_key missing; headers missing
	} {
		if !strings.Contains(sql, want) {
			t.Errorf("rowsSQL lacks %q:\n%s", want, sql)
		}
	}
	if len(args) != 6 || args[3] != c.XID || args[5] != c.CTID {
		t.Errorf("args = %v", args)
	}
	q.commitTS, q.after, q.sel = false, nil, Selection{Until: since}
	sql, args = q.countSQL()
	for _, want := range []string{`created_at < $1::timestamptz`, `count(*)`, `max(created_at) FILTER (WHERE isfinite(created_at))`} {
		if !strings.Contains(sql, want) {
			t.Errorf("countSQL lacks %q:\n%s", want, sql)
		}
	}
	if strings.Contains(sql, "pg_xact_commit_timestamp") || len(args) != 1 {
		t.Errorf("countSQL without commit timestamps:\n%s\nargs %v", sql, args)
	}
	// A resumed run without --until is bounded by the first snapshot.
	q.sel, q.bound = Selection{}, since
	if sql, _ := q.countSQL(); !strings.Contains(sql, `created_at <= $1::timestamptz`) {
		t.Errorf("resumed countSQL lacks the bound:\n%s", sql)
	}
}

// fakeSink records produced events and acknowledges them when told.
type fakeSink struct {
	mu      sync.Mutex
	evs     []*outbox.Event
	acks    []sink.Acker
	failKey string // acknowledged at once with a record error

	// transactions
	begun, committed, aborted int
	inTxn                     []string // keys of the open transaction
	committedKeys             []string
	cps                       []kafka.TxnMark
}

func (s *fakeSink) Produce(ev *outbox.Event, a sink.Acker) {
	if ev.IdempotencyKey == s.failKey {
		a.Acked(sink.Result{Partition: -1}, &sink.Error{Kind: sink.Record, Class: "INVALID_HEADERS", Err: kafka.ErrInvalidHeaders})
		return
	}
	s.mu.Lock()
	s.evs = append(s.evs, ev)
	s.acks = append(s.acks, a)
	s.inTxn = append(s.inTxn, ev.IdempotencyKey)
	s.mu.Unlock()
}

// ack acknowledges the pending events at indexes, in that order.
func (s *fakeSink) ack(idx ...int) {
	s.mu.Lock()
	acks := s.acks
	s.mu.Unlock()
	for _, i := range idx {
		if acks[i] != nil {
			acks[i].Acked(sink.Result{}, nil)
			acks[i] = nil
		}
	}
}

func (s *fakeSink) Flush(context.Context) error {
	s.mu.Lock()
	n := len(s.acks)
	s.mu.Unlock()
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	s.ack(all...)
	return nil
}
func (s *fakeSink) Close()          {}
func (s *fakeSink) BeginTxn() error { s.begun++; s.inTxn = nil; return nil }
func (s *fakeSink) CommitTxn(_ context.Context, cp kafka.TxnMark) error {
	s.committed++
	s.committedKeys = append(s.committedKeys, s.inTxn...)
	s.cps = append(s.cps, cp)
	return nil
}
func (s *fakeSink) AbortTxn(context.Context) error { s.aborted++; return nil }

func event(key string) *outbox.Event {
	return &outbox.Event{IdempotencyKey: key, ID: key, Payload: []byte(`{}`), Resent: true}
}

// TestEmitterAtLeastOnce: records go in order; the frontier moves over
// acknowledged rows only; a refused row stops the next emit with its key.
func TestEmitterAtLeastOnce(t *testing.T) {
	fs := &fakeSink{failKey: "bad"}
	em := &emitter{sink: fs, front: &frontier{}, slots: make(chan struct{}, 10)}
	ctx := context.Background()
	for i, k := range []string{"a", "b", "c"} {
		if err := em.emit(ctx, event(k), cur(i), 1); err != nil {
			t.Fatal(err)
		}
	}
	fs.ack(1, 2)
	if _, n, _ := em.front.prefix(); n != 0 {
		t.Fatalf("prefix %d rows before the first row's ack, want 0", n)
	}
	fs.ack(0)
	if c, n, _ := em.front.prefix(); n != 3 || *c != cur(2) {
		t.Fatalf("prefix = %v, %d; want row 2, 3", c, n)
	}
	if err := em.emit(ctx, event("bad"), cur(3), 1); err != nil {
		t.Fatal(err) // its failure is reported by the next call
	}
	err := em.emit(ctx, event("d"), cur(4), 1)
	if err == nil || !strings.Contains(err.Error(), "bad:") {
		t.Fatalf("emit after a refused row = %v, want the refused key", err)
	}
	if err := em.finish(ctx); err == nil {
		t.Fatal("finish after a refused row = nil")
	}
	if _, n, _ := em.front.prefix(); n != 3 {
		t.Errorf("prefix %d rows, want 3: it stops before the refused row", n)
	}
	var keys []string
	for _, ev := range fs.evs {
		keys = append(keys, ev.IdempotencyKey)
	}
	if !slices.Equal(keys, []string{"a", "b", "c"}) {
		t.Errorf("produced %v, want a b c in order", keys)
	}
}

// TestEmitterBounded: at most cap(slots) records are unacknowledged; a
// canceled context ends the wait for a slot.
func TestEmitterBounded(t *testing.T) {
	fs := &fakeSink{}
	em := &emitter{sink: fs, front: &frontier{}, slots: make(chan struct{}, 2)}
	ctx, cancel := context.WithCancel(context.Background())
	_ = em.emit(ctx, event("a"), cur(0), 1)
	_ = em.emit(ctx, event("b"), cur(1), 1)
	cancel()
	if err := em.emit(ctx, event("c"), cur(2), 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("a third unacknowledged record: %v, want it to wait (and end with the context)", err)
	}
}

// TestEmitterExactlyOnce: rows go in transactions of at most per rows,
// each committing the resend's own checkpoint key; the frontier moves
// only at a commit. (Mutation: marking rows done at their ack fails it.)
func TestEmitterExactlyOnce(t *testing.T) {
	fs := &fakeSink{}
	cp := kafka.TxnMark{Slot: "walpost-resend", SystemID: 7}
	em := &emitter{sink: fs, txs: fs, front: &frontier{}, slots: make(chan struct{}, 10), per: 2, interval: time.Hour, cp: cp}
	ctx := context.Background()
	for i, k := range []string{"a", "b", "c"} {
		if err := em.emit(ctx, event(k), cur(i), 1); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			fs.ack(0, 1)
			if _, n, _ := em.front.prefix(); n != 0 {
				t.Fatalf("prefix %d rows before the commit, want 0", n)
			}
		}
	}
	// "c" opened the second transaction after committing a and b.
	if fs.committed != 1 || !slices.Equal(fs.committedKeys, []string{"a", "b"}) {
		t.Fatalf("committed %d transactions %v, want 1 of a b", fs.committed, fs.committedKeys)
	}
	if _, n, _ := em.front.prefix(); n != 2 {
		t.Fatalf("prefix %d rows after the first commit, want 2", n)
	}
	if err := em.finish(ctx); err != nil {
		t.Fatal(err)
	}
	if fs.committed != 2 || em.txns != 2 || !slices.Equal(fs.committedKeys, []string{"a", "b", "c"}) {
		t.Fatalf("committed %d (%d) %v, want 2 transactions of a b c", fs.committed, em.txns, fs.committedKeys)
	}
	if _, n, _ := em.front.prefix(); n != 3 {
		t.Fatalf("prefix %d rows at the end, want 3", n)
	}
	for _, c := range fs.cps {
		if kafka.TransactionalID(c.Slot, c.SystemID) == kafka.TransactionalID("walpost", 7) || c.LSN != 0 {
			t.Errorf("checkpoint %+v: want resend's own key at LSN 0, never the slot's", c)
		}
	}
	// A failure aborts the open transaction.
	_ = em.emit(ctx, event("d"), cur(3), 1)
	em.settle(ctx, slog.New(slog.DiscardHandler))
	if fs.aborted != 1 || em.open {
		t.Errorf("settle after a failure: aborted %d, open %v; want the transaction aborted", fs.aborted, em.open)
	}
}

// TestResentHeader: a resent event's record carries walpost_resent: true
// after every other header; an ordinary one does not.
func TestResentHeader(t *testing.T) {
	ev := &outbox.Event{ID: "1", IdempotencyKey: "k", Payload: []byte(`{}`), CreatedAt: "2026-12-01 10:00:00+00", EventType: "order.created", Resent: true}
	r, err := kafka.BuildRecord(ev, "t")
	if err != nil {
		t.Fatal(err)
	}
	last := r.Headers[len(r.Headers)-1]
	if last.Key != kafka.HeaderResent || string(last.Value) != "true" {
		t.Errorf("last header %s=%s, want walpost_resent=true", last.Key, last.Value)
	}
	ev.Resent = false
	r, _ = kafka.BuildRecord(ev, "t")
	if slices.ContainsFunc(r.Headers, func(h kgo.RecordHeader) bool { return h.Key == kafka.HeaderResent }) {
		t.Error("an ordinary event's record carries walpost_resent")
	}
}

// TestReport: the text report names the order, the selection, the
// counts, the rate and whether the progress file is finished.
func TestReport(t *testing.T) {
	r := &Report{Table: `"public"."outbox"`, By: ByCommitTimestamp,
		Selection:  Selection{Since: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), Where: "event_type = 'x'", Topic: "redrive"},
		SnapshotAt: time.Date(2026, 12, 1, 10, 10, 0, 0, time.UTC), Matched: 10, Produced: 10, Bytes: 2500,
		Elapsed: 2 * time.Second, ProgressFile: "p.json", Finished: true}
	var b strings.Builder
	if err := r.Write(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"commit order", "commit timestamp at or after 2026-12-01T10:00:00Z", "--where event_type = 'x'",
		"redrive (--topic)", "10 of 10 produced with walpost_resent: true, 2.5 KB", "5 rows/s", "p.json (finished)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
	r.DryRun, b = true, strings.Builder{}
	_ = r.Write(&b)
	if !strings.Contains(b.String(), "dry run") || !strings.Contains(b.String(), "10 match") || strings.Contains(b.String(), "produced with") {
		t.Errorf("dry-run report:\n%s", b.String())
	}
}
