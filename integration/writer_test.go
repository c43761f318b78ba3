package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/writer"
)

// TestWriterRetriedTransactionOneEvent: a debit retried with the same key
// (writer.DeriveKey) after its connection was killed before the outbox
// insert, and again after a commit whose reply the application did not
// trust, reaches Kafka through walpost run as one record.
func TestWriterRetriedTransactionOneEvent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	accounts := "accounts_" + f.Slot
	mustExec(t, f.Pool, fmt.Sprintf(`CREATE TABLE %s (id text PRIMARY KEY, balance int NOT NULL)`, accounts))
	t.Cleanup(func() { _, _ = f.Pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+accounts) })
	mustExec(t, f.Pool, fmt.Sprintf(`INSERT INTO %s VALUES ('a1', 100)`, accounts))
	outbox, err := writer.NewTable(f.Table)
	if err != nil {
		t.Fatal(err)
	}
	p := f.start()
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not start streaming")
	}

	key := writer.DeriveKey("account/a1/debit", 1)
	payload := `{"account": "a1", "amount": 30, "event": "account.debited"}`
	debit := func(kill bool) error {
		return pgx.BeginFunc(ctx, f.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET balance = balance - 30 WHERE id = 'a1'`, accounts)); err != nil {
				return err
			}
			if kill {
				var pid int
				if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
					return err
				}
				var ok bool
				if err := f.Pool.QueryRow(ctx, `SELECT pg_terminate_backend($1, 30000)`, pid).Scan(&ok); err != nil || !ok {
					t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
				}
			}
			return outbox.Insert(ctx, tx, writer.Event{Key: key, Payload: []byte(payload), EventType: "account.debited", PartitionKey: "a1"})
		})
	}
	if err := debit(true); err == nil {
		t.Fatal("attempt 1: committed although its connection was killed")
	}
	if err := debit(false); err != nil {
		t.Fatalf("attempt 2: %v", err)
	}
	err = debit(false)
	var dk *writer.DuplicateKeyError
	if !errors.As(err, &dk) || dk.Key != key {
		t.Fatalf("attempt 3: err = %v, want a *writer.DuplicateKeyError for %s", err, key)
	}
	var balance int
	if err := f.Pool.QueryRow(ctx, `SELECT balance FROM `+accounts+` WHERE id = 'a1'`).Scan(&balance); err != nil || balance != 70 {
		t.Fatalf("balance %d (%v), want 70: debited once", balance, err)
	}
	// A later event: once it is in Kafka, walpost has read past the debit.
	marker := writer.NewKey()
	if err := pgx.BeginFunc(ctx, f.Pool, func(tx pgx.Tx) error {
		return outbox.Insert(ctx, tx, writer.Event{Key: marker, Payload: []byte(`{"marker": true}`)})
	}); err != nil {
		t.Fatal(err)
	}

	recs := f.consumeAll(t, 2, 60*time.Second)
	var debits []record
	sawMarker := false
	for _, r := range recs {
		switch r.Key {
		case key:
			debits = append(debits, r)
		case marker:
			sawMarker = true
		default:
			t.Errorf("unexpected record %q", r.Key)
		}
	}
	if !sawMarker || len(debits) != 1 {
		t.Fatalf("%d records of the debit (want 1), marker seen %v; all: %d records", len(debits), sawMarker, len(recs))
	}
	var rendered string // walpost sends the payload as PostgreSQL renders the jsonb
	if err := f.Pool.QueryRow(ctx, `SELECT $1::jsonb::text`, payload).Scan(&rendered); err != nil {
		t.Fatal(err)
	}
	if d := debits[0]; string(d.Value) != rendered || d.Headers["event_type"] != "account.debited" || d.Headers["idempotency_key"] != key {
		t.Fatalf("debit record value %s headers %v", d.Value, d.Headers)
	}
}

const (
	traceparentA = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tracestateA  = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
)

// TestWriterTraceContext: an event written through writer.Insert with a
// context from writer.WithTraceContext reaches Kafka through walpost run
// with the headers traceparent and tracestate of that context; one written
// without has neither.
func TestWriterTraceContext(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	outbox, err := writer.NewTable(f.Table)
	if err != nil {
		t.Fatal(err)
	}
	p := f.start()
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not start streaming")
	}
	traced, plain := writer.NewKey(), writer.NewKey()
	tctx, err := writer.WithTraceContext(ctx, traceparentA, tracestateA)
	if err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, f.Pool, func(tx pgx.Tx) error {
		if err := outbox.Insert(tctx, tx, writer.Event{Key: traced, Payload: []byte(`{"traced": true}`), Headers: map[string]string{"tenant": "t1"}}); err != nil {
			return err
		}
		return outbox.Insert(ctx, tx, writer.Event{Key: plain, Payload: []byte(`{"traced": false}`)})
	}); err != nil {
		t.Fatal(err)
	}
	recs := f.consumeAll(t, 2, 60*time.Second)
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	for _, r := range recs {
		switch r.Key {
		case traced:
			if r.Headers["traceparent"] != traceparentA || r.Headers["tracestate"] != tracestateA || r.Headers["tenant"] != "t1" {
				t.Errorf("traced record: headers %v; want traceparent %s, tracestate %s and tenant t1", r.Headers, traceparentA, tracestateA)
			}
		case plain:
			if _, ok := r.Headers["traceparent"]; ok {
				t.Errorf("record written without a trace context: headers %v", r.Headers)
			}
		default:
			t.Errorf("unexpected record %q", r.Key)
		}
	}
}
