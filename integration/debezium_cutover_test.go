package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The SQL of docs/migrate-from-debezium.md, steps 1 and 2, with the slot
// names as parameters ($1 walpost's, $2 Debezium's).
const (
	cutoverCreateSlot = `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')`
	cutoverReady      = `SELECT d.confirmed_flush_lsn >= w.confirmed_flush_lsn
		FROM pg_replication_slots d JOIN pg_replication_slots w ON w.slot_name = $1
		WHERE d.slot_name = $2`
)

// TestDebeziumCutover follows docs/migrate-from-debezium.md while writers
// insert Debezium-layout rows all along: Debezium (Kafka Connect, the
// PostgreSQL connector and the Outbox Event Router under its defaults)
// forwards; walpost's slot is created (step 1, its consistent point
// noted); once Debezium's slot confirmed past it (step 2) the connector is
// stopped and its slot dropped (step 3); walpost starts on its slot (step
// 4). After the writers stopped, every row of the table is on its
// outbox.event.<aggregatetype> topic (nothing lost), the records delivered
// twice (by id header) are at most the rows committed between the
// creation of walpost's slot and Debezium's stop, and per aggregateid the
// first occurrences are in commit order.
//
// It needs a JDK, as TestDebeziumBytes: WALPOST_DEBEZIUM=1 (make
// test-debezium) runs it, otherwise it skips.
func TestDebeziumCutover(t *testing.T) {
	// Not in parallel: Kafka Connect creates and drops dozens of topics
	// at once, and the broker applies them one by one (seconds behind
	// under load), which other tests' new topics would wait behind.
	if os.Getenv("WALPOST_DEBEZIUM") != "1" {
		t.Skip("WALPOST_DEBEZIUM=1 (make test-debezium) runs Kafka Connect with Debezium against walpost")
	}
	began := time.Now()
	f := newFixture(t, fixtureOpts{})
	debeziumTable(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	libs := debeziumLibs(t)

	types, topics := debeziumTopics(ctx, t, f)

	// Everything on the topics, read from the start all along.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var mu sync.Mutex
	var recs []*kgo.Record // per partition in offset order
	consumeCtx, stopConsume := context.WithCancel(ctx)
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for consumeCtx.Err() == nil {
			fetches := cl.PollFetches(consumeCtx)
			mu.Lock()
			fetches.EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
			mu.Unlock()
		}
	}()
	defer func() { stopConsume(); <-consumed }()

	// Debezium runs, on a slot that exists before the first row
	// (snapshot.mode=no_data).
	dbzSlot := f.Slot + "_dbz"
	mustExec(t, f.Pool, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, dbzSlot)
	t.Cleanup(func() { dropSlot(f, dbzSlot) })

	// Writers: one per aggregate, each committing transactions of 1 to 3
	// rows with its own increasing seq, so commit order per aggregateid is
	// seq order.
	const writers, maxRows = 4, 3
	var committed atomic.Int64
	writeCtx, stopWriters := context.WithCancel(ctx)
	var wg sync.WaitGroup
	writeErr := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			agg, ty := fmt.Sprintf("agg-%d", w), types[w%len(types)]
			for seq := 0; writeCtx.Err() == nil; {
				tx, err := f.Pool.Begin(writeCtx)
				if err != nil {
					if writeCtx.Err() == nil {
						writeErr <- err
					}
					return
				}
				n := 1 + seq%maxRows
				for i := 0; i < n; i++ {
					if _, err := tx.Exec(writeCtx, fmt.Sprintf(`INSERT INTO %s (aggregatetype, aggregateid, type, payload) VALUES ($1, $2, 'Created', $3)`, f.Table),
						ty, agg, fmt.Sprintf(`{"seq": %d}`, seq+i)); err != nil {
						_ = tx.Rollback(context.Background())
						if writeCtx.Err() == nil {
							writeErr <- err
						}
						return
					}
				}
				// Commit on a context of its own: a stop never leaves it
				// unknown whether the rows are in the table.
				if err := tx.Commit(context.Background()); err != nil {
					writeErr <- err
					return
				}
				seq += n
				committed.Add(int64(n))
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	defer func() { stopWriters(); wg.Wait() }()

	workDir := t.TempDir()
	stopDebezium, restPort := startConnect(t, libs, workDir,
		[]dbzConnector{{profile: converterProfiles[0], name: converterProfiles[0].name(), slot: dbzSlot, table: f.Table, publication: f.Publication}}, nil)
	connectLog := func() string { return tail(filepath.Join(workDir, "connect.log"), 60) }
	waitDelivered := func(n int, what string) {
		t.Helper()
		waitFor(t, 3*time.Minute, what, func() bool {
			if msg := connectFailure(restPort); msg != "" {
				t.Fatalf("%s\nKafka Connect log (tail):\n%s", msg, connectLog())
			}
			mu.Lock()
			defer mu.Unlock()
			return len(recs) >= n
		})
	}
	waitDelivered(100, "Debezium delivering")

	// Step 1 (walpost check, then walpost's slot; its consistent point).
	env := f.env("WALPOST_MAPPING_PROFILE=debezium")
	if out, err := walpostOutput(t, env, "check"); err != nil || !strings.Contains(out, "OK    outbox") {
		t.Fatalf("walpost check (%v):\n%s", err, out)
	}
	before := committed.Load()
	var startText string
	if err := f.Pool.QueryRow(ctx, cutoverCreateSlot, f.Slot).Scan(&startText); err != nil {
		t.Fatal(err)
	}
	start, _ := pglogrepl.ParseLSN(startText)

	// Step 2: wait until Debezium's slot confirmed past walpost's.
	waitFor(t, 3*time.Minute, "Debezium's confirmed_flush_lsn past walpost's slot", func() bool {
		var ready *bool
		if err := f.Pool.QueryRow(ctx, cutoverReady, f.Slot, dbzSlot).Scan(&ready); err != nil {
			t.Fatal(err)
		}
		return ready != nil && *ready
	})
	var dbzConfirmed string
	if err := f.Pool.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, dbzSlot).Scan(&dbzConfirmed); err != nil {
		t.Fatal(err)
	}

	// Step 3: stop Debezium, drop its slot.
	stopDebezium()
	after := committed.Load()
	mustExec(t, f.Pool, `SELECT pg_drop_replication_slot($1)`, dbzSlot)

	// Step 4: walpost on its slot.
	p := f.start("WALPOST_MAPPING_PROFILE=debezium")
	if !p.waitLog("msg=streaming", 60*time.Second) {
		t.Fatalf("walpost did not start streaming:\n%s", tail(p.log, 40))
	}
	waitFor(t, time.Minute, "rows written after walpost started", func() bool { return committed.Load() > after+200 })
	stopWriters()
	wg.Wait()
	select {
	case err := <-writeErr:
		t.Fatalf("writer: %v", err)
	default:
	}

	// Every row of the table, its aggregateid and seq.
	type row struct {
		topic, agg string
		seq        int
	}
	table := map[string]row{}
	rs, err := f.Pool.Query(ctx, fmt.Sprintf(`SELECT id::text, aggregatetype, aggregateid, (payload->>'seq')::int FROM %s`, f.Table))
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var id string
		var r row
		if err := rs.Scan(&id, &r.topic, &r.agg, &r.seq); err != nil {
			t.Fatal(err)
		}
		r.topic = "outbox.event." + r.topic
		table[id] = r
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	if int64(len(table)) != committed.Load() {
		t.Fatalf("the table has %d rows, the writers committed %d", len(table), committed.Load())
	}
	idOf := func(r *kgo.Record) string {
		for _, h := range r.Headers {
			if h.Key == "id" {
				return string(h.Value)
			}
		}
		return ""
	}
	missing := func() int {
		mu.Lock()
		defer mu.Unlock()
		seen := map[string]bool{}
		for _, r := range recs {
			if w, ok := table[idOf(r)]; ok && w.topic == r.Topic {
				seen[idOf(r)] = true
			}
		}
		return len(table) - len(seen)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for missing() > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // late duplicates
	stopConsume()
	<-consumed

	lost := missing()
	copies := map[string]int{}
	lastSeq := map[string]int{}
	var foreign, misrouted, disorder int
	for _, r := range recs {
		id := idOf(r)
		w, ok := table[id]
		switch {
		case !ok:
			foreign++
			continue
		case w.topic != r.Topic || string(r.Key) != w.agg || string(r.Value) != fmt.Sprintf(`{"seq": %d}`, w.seq):
			misrouted++
			t.Errorf("id %s: record on %s key %q value %q, want %s key %q seq %d", id, r.Topic, r.Key, r.Value, w.topic, w.agg, w.seq)
		}
		copies[id]++
		if copies[id] > 1 {
			continue
		}
		if last, ok := lastSeq[w.agg]; ok && w.seq <= last {
			disorder++
			if disorder <= 5 {
				t.Errorf("%s: seq %d (id %s) first delivered after seq %d", w.agg, w.seq, id, last)
			}
		}
		lastSeq[w.agg] = w.seq
	}
	dups := 0
	for _, n := range copies {
		dups += n - 1
	}
	window := after - before
	t.Logf("cutover: %d rows (%d before walpost's slot, %d between it and Debezium's stop, %d after); walpost's slot at %s, Debezium confirmed %s when stopped; %d records, %d lost, %d duplicates (bound %d = rows in the window + %d in flight), %d out of order; %s",
		len(table), before, window, int64(len(table))-after, start, dbzConfirmed, len(recs), lost, dups, window+writers*maxRows, writers*maxRows, disorder, time.Since(began).Round(time.Second))
	if lost != 0 {
		t.Errorf("%d of %d rows never reached Kafka", lost, len(table))
	}
	if foreign != 0 {
		t.Errorf("%d records with an id not in the table", foreign)
	}
	// Rows committed while the counters were read (one transaction per
	// writer on each side) may fall either way.
	if int64(dups) > window+writers*maxRows {
		t.Errorf("%d duplicates, more than the %d rows committed between walpost's slot and Debezium's stop (+%d in flight)", dups, window, writers*maxRows)
	}
	if t.Failed() {
		t.Logf("Kafka Connect log (tail):\n%s", connectLog())
	}
}
