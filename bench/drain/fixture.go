package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
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

// fixture is the run's own outbox table and publication, and per round a
// slot for each reader and a topic for walpost.
type fixture struct {
	pgURL       string
	brokers     []string
	id          string
	table       string
	publication string
	rounds      []roundNames
	pool        *pgxpool.Pool
	kcl         *kgo.Client
	adm         *kadm.Client
	kafkaPID    int // the local stack's broker, for its CPU time; 0 when unknown
}

type roundNames struct {
	slotBase    string // pg_recvlogical's slot
	slotWalpost string
	topic       string
}

func newFixture(pgURL string, brokers []string, rounds int) *fixture {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	id := "bench_" + hex.EncodeToString(b)
	f := &fixture{pgURL: pgURL, brokers: brokers, id: id, table: "outbox_" + id, publication: "pub_" + id}
	if b, err := os.ReadFile(".stack/kafka.pid"); err == nil {
		f.kafkaPID, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	for i := 1; i <= rounds; i++ {
		n := strconv.Itoa(i)
		f.rounds = append(f.rounds, roundNames{
			slotBase:    "slot_" + id + "_recvlogical_" + n,
			slotWalpost: "slot_" + id + "_walpost_" + n,
			topic:       "topic_" + id + "_" + n,
		})
	}
	return f
}

func (f *fixture) setup(ctx context.Context, partitions int) error {
	stmts := []string{
		fmt.Sprintf(`CREATE TABLE %s (LIKE outbox INCLUDING ALL)`, f.table),
		fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert')`, f.publication, f.table),
	}
	// Every slot exists before the first event is written (and after the
	// publication, DESIGN §3), so every reader decodes the same backlog.
	for _, rn := range f.rounds {
		stmts = append(stmts,
			fmt.Sprintf(`SELECT pg_create_logical_replication_slot('%s', 'pgoutput')`, rn.slotBase),
			fmt.Sprintf(`SELECT pg_create_logical_replication_slot('%s', 'pgoutput')`, rn.slotWalpost))
	}
	for _, s := range stmts {
		if _, err := f.pool.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, rn := range f.rounds {
		resp, err := f.adm.CreateTopic(cctx, int32(partitions), 1, nil, rn.topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			return fmt.Errorf("create topic %s: %w", rn.topic, err)
		}
	}
	// Wait until the metadata shows every partition with a leader.
	for _, rn := range f.rounds {
		for !f.topicReady(cctx, rn.topic, partitions) {
			select {
			case <-cctx.Done():
				return fmt.Errorf("topic %s not ready: %w", rn.topic, cctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
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

func (f *fixture) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var topics []string
	for _, rn := range f.rounds {
		for _, slot := range []string{rn.slotBase, rn.slotWalpost} {
			// A walsender that is shutting down may still hold the slot.
			for i := 0; i < 50; i++ {
				_, err := f.pool.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
				if err == nil {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
		topics = append(topics, rn.topic)
	}
	_, _ = f.pool.Exec(ctx, fmt.Sprintf(`DROP PUBLICATION IF EXISTS %s`, f.publication))
	_, _ = f.pool.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %s`, f.table))
	_, _ = f.adm.DeleteTopics(ctx, topics...)
	logf("cleaned up %s", f.id)
}

func (f *fixture) currentLSN(ctx context.Context) (pglogrepl.LSN, error) {
	var s string
	if err := f.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		return 0, err
	}
	return pglogrepl.ParseLSN(s)
}

// payload returns an order event of about size bytes as PostgreSQL renders
// the jsonb.
func payload(i, size int) string {
	base := fmt.Sprintf(`{"order_id": %d, "customer_id": "cust-%06d", "amount_cents": %d, "currency": "EUR", "status": "created", "items": [{"sku": "sku-%04d", "qty": %d}], "note": ""}`,
		i, i%100_000, 1000+i%9000, i%5000, 1+i%7)
	if pad := size - len(base); pad > 0 {
		base = base[:len(base)-2] + strings.Repeat("x", pad) + `"}`
	}
	return base
}

type backlog struct {
	startLSN, endLSN pglogrepl.LSN
	walBytes         int64
	avgPayload       float64
	writeDur         time.Duration
}

// writeBacklog writes o.events rows with COPY, o.txnSize per transaction,
// from o.writers connections, and returns the WAL range they took.
func (f *fixture) writeBacklog(ctx context.Context, o options) (backlog, error) {
	var bl backlog
	var err error
	if bl.startLSN, err = f.currentLSN(ctx); err != nil {
		return bl, err
	}
	logf("writing %d events (%d writers, %d per transaction, ~%d-byte payloads)", o.events, o.writers, o.txnSize, o.payloadBytes)
	start := time.Now()
	txns := (o.events + o.txnSize - 1) / o.txnSize
	next := make(chan int, txns)
	for t := 0; t < txns; t++ {
		next <- t
	}
	close(next)
	cols := []string{"idempotency_key", "payload", "event_type"}
	var wg sync.WaitGroup
	errs := make(chan error, o.writers)
	for w := 0; w < o.writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := f.pool.Acquire(ctx)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Release()
			rows := make([][]any, 0, o.txnSize)
			for t := range next {
				rows = rows[:0]
				for i := t * o.txnSize; i < min((t+1)*o.txnSize, o.events); i++ {
					rows = append(rows, []any{fmt.Sprintf("%s-%08d", f.id, i), payload(i, o.payloadBytes), "order.created"})
				}
				err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
					_, err := tx.CopyFrom(ctx, pgx.Identifier{f.table}, cols, pgx.CopyFromRows(rows))
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
	err = f.pool.QueryRow(ctx, fmt.Sprintf(`SELECT avg(octet_length(payload::text))::float8 FROM %s`, f.table)).Scan(&bl.avgPayload)
	return bl, err
}
