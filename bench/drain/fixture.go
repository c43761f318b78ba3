package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// fixture holds the connections of the run and every object it created
// (tables, publications, slots, topics), so they are dropped at the end,
// also on failure or Ctrl-C. Each workload drops its own objects when it
// is done, which frees the WAL its slots retain and the table's disk.
type fixture struct {
	pgURL      string
	brokers    []string
	id         string
	partitions int
	pool       *pgxpool.Pool
	kcl        *kgo.Client
	adm        *kadm.Client
	kafkaPID   int    // the local stack's broker, for its CPU time; 0 when unknown
	workDir    string // scratch files: the raw producer's rows, Debezium's work directories

	mu      sync.Mutex
	created []object
}

type objectKind int

// Drop order: slots before the publications they read, publications
// before their table; topics last.
const (
	objSlot objectKind = iota
	objPublication
	objTable
	objTopic
)

type object struct {
	kind objectKind
	name string
}

func newFixture(pgURL string, brokers []string, partitions int) *fixture {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	f := &fixture{pgURL: pgURL, brokers: brokers, id: "bench_" + hex.EncodeToString(b), partitions: partitions}
	if b, err := os.ReadFile(".stack/kafka.pid"); err == nil {
		f.kafkaPID, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	return f
}

func (f *fixture) track(kind objectKind, name string) object {
	f.mu.Lock()
	defer f.mu.Unlock()
	o := object{kind, name}
	f.created = append(f.created, o)
	return o
}

// create runs stmt and tracks the object it created.
func (f *fixture) create(ctx context.Context, kind objectKind, name, stmt string) (object, error) {
	if _, err := f.pool.Exec(ctx, stmt); err != nil {
		return object{}, fmt.Errorf("%s: %w", stmt, err)
	}
	return f.track(kind, name), nil
}

func (f *fixture) createTable(ctx context.Context, name string) (object, error) {
	return f.create(ctx, objTable, name, fmt.Sprintf(`CREATE TABLE %s (LIKE outbox INCLUDING ALL)`, name))
}

func (f *fixture) createPublication(ctx context.Context, name, table string) (object, error) {
	return f.create(ctx, objPublication, name, fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert')`, name, table))
}

// emptyRowFilter is the row filter of the decode ceiling's publication:
// never true, as idempotency_key is NOT NULL, so pgoutput decodes every
// insert and sends none (PostgreSQL 15+ also sends no empty transaction).
const emptyRowFilter = "idempotency_key IS NULL"

// createFilteredPublication creates a publication of table's inserts with
// the row filter where (PostgreSQL 15+).
func (f *fixture) createFilteredPublication(ctx context.Context, name, table, where string) (object, error) {
	return f.create(ctx, objPublication, name, fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s WHERE (%s) WITH (publish = 'insert')`, name, table, where))
}

// rowFilterSkip returns why publications cannot have row filters on this
// server ("" when they can: PostgreSQL 15+).
func (f *fixture) rowFilterSkip(ctx context.Context) (string, error) {
	var num int
	var version string
	if err := f.pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, current_setting('server_version')`).Scan(&num, &version); err != nil {
		return "", fmt.Errorf("server version: %w", err)
	}
	if num < 150000 {
		return fmt.Sprintf("PostgreSQL %s has no publication row filters (15+)", version), nil
	}
	return "", nil
}

func (f *fixture) createSlot(ctx context.Context, name string) (object, error) {
	return f.create(ctx, objSlot, name, fmt.Sprintf(`SELECT pg_create_logical_replication_slot('%s', 'pgoutput')`, name))
}

// createTopic creates a topic with the run's partitions (replication
// factor 1) and waits until every partition has a leader.
func (f *fixture) createTopic(ctx context.Context, name string, configs map[string]*string) (object, error) {
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	resp, err := f.adm.CreateTopic(cctx, int32(f.partitions), 1, configs, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return object{}, fmt.Errorf("create topic %s: %w", name, err)
	}
	o := f.track(objTopic, name)
	for !f.topicReady(cctx, name, f.partitions) {
		select {
		case <-cctx.Done():
			return o, fmt.Errorf("topic %s not ready: %w", name, cctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return o, nil
}

func (f *fixture) topicReady(ctx context.Context, topic string, partitions int) bool {
	md, err := f.adm.Metadata(ctx, topic)
	if err != nil {
		return false
	}
	t, ok := md.Topics[topic]
	if !ok || t.Err != nil || len(t.Partitions) != partitions {
		return false
	}
	for _, p := range t.Partitions {
		if p.Leader < 0 || p.Err != nil {
			return false
		}
	}
	return true
}

// drop drops objs (in dependency order) and forgets them; errors are
// logged, not returned: a leftover is not worth failing a finished run.
func (f *fixture) drop(objs ...object) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	byKind := map[objectKind][]string{}
	for _, o := range objs {
		byKind[o.kind] = append(byKind[o.kind], o.name)
	}
	for _, slot := range byKind[objSlot] {
		// A walsender that is shutting down may still hold the slot.
		var err error
		for i := 0; i < 50; i++ {
			if _, err = f.pool.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot); err == nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil {
			logf("WARNING: drop slot %s: %v", slot, err)
		}
	}
	for _, p := range byKind[objPublication] {
		if _, err := f.pool.Exec(ctx, fmt.Sprintf(`DROP PUBLICATION IF EXISTS %s`, p)); err != nil {
			logf("WARNING: drop publication %s: %v", p, err)
		}
	}
	for _, t := range byKind[objTable] {
		if _, err := f.pool.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %s`, t)); err != nil {
			logf("WARNING: drop table %s: %v", t, err)
		}
	}
	if topics := byKind[objTopic]; len(topics) > 0 {
		if _, err := f.adm.DeleteTopics(ctx, topics...); err != nil {
			logf("WARNING: delete topics %v: %v", topics, err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	kept := f.created[:0]
	for _, c := range f.created {
		if !containsObject(objs, c) {
			kept = append(kept, c)
		}
	}
	f.created = kept
}

func containsObject(objs []object, o object) bool {
	for _, x := range objs {
		if x == o {
			return true
		}
	}
	return false
}

// cleanup drops whatever is still tracked.
func (f *fixture) cleanup() {
	f.mu.Lock()
	objs := append([]object(nil), f.created...)
	f.mu.Unlock()
	if len(objs) > 0 {
		f.drop(objs...)
	}
	logf("cleaned up %s", f.id)
}

func (f *fixture) currentLSN(ctx context.Context) (pglogrepl.LSN, error) {
	var s string
	if err := f.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		return 0, err
	}
	return pglogrepl.ParseLSN(s)
}

// words fill payloads up to their size: text that compresses like prose,
// neither like a run of one byte nor like random bytes.
var words = strings.Fields(`order customer invoice shipment parcel warehouse berlin paris lisbon
	madrid vienna prague express standard return refund gift wrapped fragile priority
	blue green red black white small medium large extra cotton wool leather steel
	glass paper oak pine maple walnut copper silver golden bright quiet rapid gentle
	morning evening winter summer spring autumn north south east west river mountain
	valley harbour garden market station bridge castle tower`)

// payload returns an order event of about size bytes as PostgreSQL renders
// the jsonb (jsonb reorders keys and normalises spaces; the length barely
// changes). The note is filled with pseudo-random words chosen from i, so
// large payloads compress like text: Kafka's lz4 and PostgreSQL's TOAST
// would shrink a run of one repeated byte to almost nothing.
func payload(i, size int) string {
	base := fmt.Sprintf(`{"order_id": %d, "customer_id": "cust-%06d", "amount_cents": %d, "currency": "EUR", "status": "created", "items": [{"sku": "sku-%04d", "qty": %d}], "note": ""}`,
		i, i%100_000, 1000+i%9000, i%5000, 1+i%7)
	pad := size - len(base)
	if pad <= 0 {
		return base
	}
	var b strings.Builder
	b.Grow(size)
	b.WriteString(base[:len(base)-2])
	x := uint32(i)*2654435761 + 1 // a per-row xorshift stream
	for n := 0; n < pad; {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		w := words[x%uint32(len(words))]
		if n > 0 {
			b.WriteByte(' ')
			n++
		}
		if n+len(w) > pad {
			w = w[:pad-n]
		}
		b.WriteString(w)
		n += len(w)
	}
	b.WriteString(`"}`)
	return b.String()
}

type backlog struct {
	events           int
	startLSN, endLSN pglogrepl.LSN
	walBytes         int64
	avgPayload       float64 // bytes of payload::text per event
	writeDur         time.Duration
	writers, txnSize int
}

// payloadBytes is the payload volume of the backlog, for MB/s.
func (bl backlog) payloadBytes() float64 { return bl.avgPayload * float64(bl.events) }

// eventKey is the idempotency key of event i of a table's backlog.
func eventKey(prefix string, i int) string { return fmt.Sprintf("%s-%09d", prefix, i) }

// writeBacklog writes events rows with COPY into table, txnSize per
// transaction, from writers connections, and returns the WAL range they
// took. bigtxn is writers = 1, txnSize = events: one transaction.
func (f *fixture) writeBacklog(ctx context.Context, table, keyPrefix string, events, writers, txnSize, payloadSize int) (backlog, error) {
	bl := backlog{events: events, writers: writers, txnSize: txnSize}
	var err error
	if bl.startLSN, err = f.currentLSN(ctx); err != nil {
		return bl, err
	}
	logf("writing %d events into %s (%d writers, %d per transaction, ~%d-byte payloads)", events, table, writers, txnSize, payloadSize)
	start := time.Now()
	txns := (events + txnSize - 1) / txnSize
	next := make(chan int, txns)
	for t := 0; t < txns; t++ {
		next <- t
	}
	close(next)
	cols := []string{"idempotency_key", "payload", "event_type"}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := f.pool.Acquire(ctx)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Release()
			for t := range next {
				// Rows are generated as COPY consumes them: a 200,000-row
				// transaction of 2 KB payloads never sits in memory.
				i, end := t*txnSize, min((t+1)*txnSize, events)
				row := make([]any, 3)
				src := pgx.CopyFromFunc(func() ([]any, error) {
					if i >= end {
						return nil, nil
					}
					row[0], row[1], row[2] = eventKey(keyPrefix, i), payload(i, payloadSize), "order.created"
					i++
					return row, nil
				})
				err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
					_, err := tx.CopyFrom(ctx, pgx.Identifier{table}, cols, src)
					return err
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return bl, err
	}
	bl.writeDur = time.Since(start)
	if bl.endLSN, err = f.currentLSN(ctx); err != nil {
		return bl, err
	}
	if err := f.pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint`, bl.endLSN.String(), bl.startLSN.String()).Scan(&bl.walBytes); err != nil {
		return bl, err
	}
	err = f.pool.QueryRow(ctx, fmt.Sprintf(`SELECT avg(octet_length(payload::text))::float8 FROM %s`, table)).Scan(&bl.avgPayload)
	return bl, err
}

// dumpRows writes the columns walpost reads of every row of table, in key
// (= write) order, to a file the raw producer loads before its clock
// starts: length-prefixed id, idempotency_key, payload, created_at and
// event_type, as PostgreSQL renders them in text.
func (f *fixture) dumpRows(ctx context.Context, table, path string) (int, error) {
	fh, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	w := bufio.NewWriterSize(fh, 1<<20)
	rows, err := f.pool.Query(ctx, fmt.Sprintf(`SELECT id::text, idempotency_key, payload::text, created_at::text, coalesce(event_type, '') FROM %s ORDER BY idempotency_key`, table),
		pgx.QueryResultFormats{pgx.TextFormatCode})
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	var buf []byte
	for rows.Next() {
		raw := rows.RawValues()
		buf = buf[:0]
		for _, v := range raw {
			buf = binary.AppendUvarint(buf, uint64(len(v)))
			buf = append(buf, v...)
		}
		if _, err := w.Write(buf); err != nil {
			return n, err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return n, err
	}
	return n, w.Flush()
}

// caseDir returns a fresh scratch directory for one workload × payload.
func (f *fixture) caseDir(tag string) (string, error) {
	d := filepath.Join(f.workDir, tag)
	return d, os.MkdirAll(d, 0o755)
}
