package writer_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/walpost/walpost/writer"
)

// outboxDDL is the outbox of migrations/00001_outbox.sql.
const outboxDDL = `CREATE TABLE %s (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    idempotency_key text NOT NULL UNIQUE,
    payload         jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz,
    attempts        int NOT NULL DEFAULT 0,
    last_error      text,
    topic           text,
    partition_key   text,
    event_type      text,
    headers         jsonb)`

// db is a test's own schema holding an outbox and an accounts table,
// dropped at the end.
type db struct {
	Pool   *pgxpool.Pool
	SQL    *sql.DB
	Schema string
	Outbox *writer.Table
}

// newDB skips without WALPOST_POSTGRES_URL (scripts/stack.sh up, then
// . .stack/env), and fails without it under WALPOST_REQUIRE_STACK=1.
func newDB(t testing.TB) *db {
	t.Helper()
	url := os.Getenv("WALPOST_POSTGRES_URL")
	if url == "" {
		if os.Getenv("WALPOST_REQUIRE_STACK") == "1" {
			t.Fatal("WALPOST_POSTGRES_URL unset: run scripts/stack.sh up and source .stack/env")
		}
		t.Skip("WALPOST_POSTGRES_URL unset: run scripts/stack.sh up and source .stack/env")
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	d := &db{Schema: "writer_" + hex.EncodeToString(b)}
	ctx := context.Background()
	var err error
	if d.Pool, err = pgxpool.New(ctx, url); err != nil {
		t.Fatal(err)
	}
	if d.SQL, err = sql.Open("pgx", url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = d.Pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+d.Schema+` CASCADE`)
		d.SQL.Close()
		d.Pool.Close()
	})
	d.exec(t, `CREATE SCHEMA `+d.Schema)
	d.exec(t, fmt.Sprintf(outboxDDL, d.Schema+".outbox"))
	d.exec(t, `CREATE TABLE `+d.Schema+`.accounts (id text PRIMARY KEY, balance int NOT NULL)`)
	if d.Outbox, err = writer.NewTable(d.Schema + ".outbox"); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d *db) exec(t testing.TB, q string, args ...any) {
	t.Helper()
	if _, err := d.Pool.Exec(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func (d *db) count(t testing.TB, table, where string, args ...any) int {
	t.Helper()
	var n int
	if err := d.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+d.Schema+`.`+table+` WHERE `+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// stored is an outbox row as read back.
type stored struct {
	Key, Payload                    string
	Topic, Partition, Type, Headers *string
	HasID, HasCreated               bool
}

func (d *db) rows(t testing.TB) map[string]stored {
	t.Helper()
	rs, err := d.Pool.Query(context.Background(), `SELECT idempotency_key, payload::text, topic, partition_key, event_type, headers::text,
		id IS NOT NULL, created_at IS NOT NULL FROM `+d.Schema+`.outbox`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]stored{}
	for rs.Next() {
		var s stored
		if err := rs.Scan(&s.Key, &s.Payload, &s.Topic, &s.Partition, &s.Type, &s.Headers, &s.HasID, &s.HasCreated); err != nil {
			t.Fatal(err)
		}
		out[s.Key] = s
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// via is one of the two ways of holding a transaction.
type via struct {
	name  string
	run   func(t testing.TB, d *db, fn func(insert, batch func([]writer.Event) error, exec func(string, ...any) error) error) error
	batch string // the statement a batch uses
}

var vias = []via{
	{"pgx", func(t testing.TB, d *db, fn func(insert, batch func([]writer.Event) error, exec func(string, ...any) error) error) error {
		ctx := context.Background()
		tx, err := d.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		err = fn(func(evs []writer.Event) error { return d.Outbox.Insert(ctx, tx, evs[0]) },
			func(evs []writer.Event) error { return d.Outbox.InsertBatch(ctx, tx, evs) },
			func(q string, a ...any) error { _, err := tx.Exec(ctx, q, a...); return err })
		if err != nil {
			return err
		}
		return tx.Commit(ctx)
	}, "COPY"},
	{"database/sql", func(t testing.TB, d *db, fn func(insert, batch func([]writer.Event) error, exec func(string, ...any) error) error) error {
		ctx := context.Background()
		tx, err := d.SQL.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		err = fn(func(evs []writer.Event) error { return d.Outbox.InsertSQL(ctx, tx, evs[0]) },
			func(evs []writer.Event) error { return d.Outbox.InsertBatchSQL(ctx, tx, evs) },
			func(q string, a ...any) error { _, err := tx.ExecContext(ctx, q, a...); return err })
		if err != nil {
			return err
		}
		return tx.Commit()
	}, "INSERT"},
}

func ptr(s string) *string { return &s }

func eq(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func TestInsertWritesTheColumnsWalpostReads(t *testing.T) {
	for _, v := range vias {
		t.Run(v.name, func(t *testing.T) {
			d := newDB(t)
			full := writer.Event{Key: writer.NewKey(), Payload: []byte(`{"b": [1, 2], "a": "x"}`), Topic: "orders",
				PartitionKey: "customer-7", EventType: "order.created", Headers: map[string]string{"trace": "t1", "tenant": "acme"}}
			minimal := writer.Event{Key: writer.NewKey(), Payload: []byte(`"just a string"`)}
			var batch []writer.Event
			for i := range 5 {
				batch = append(batch, writer.Event{Key: writer.DeriveKey("order/o"+fmt.Sprint(i), 1), Payload: fmt.Appendf(nil, `{"n": %d}`, i),
					Topic: map[bool]string{true: "t"}[i%2 == 0], Headers: map[bool]map[string]string{true: {"i": fmt.Sprint(i)}}[i%2 == 1]})
			}
			err := v.run(t, d, func(insert, insertBatch func([]writer.Event) error, _ func(string, ...any) error) error {
				if err := insert([]writer.Event{full}); err != nil {
					return err
				}
				if err := insert([]writer.Event{minimal}); err != nil {
					return err
				}
				return insertBatch(batch)
			})
			if err != nil {
				t.Fatal(err)
			}
			got := d.rows(t)
			if len(got) != 7 {
				t.Fatalf("%d rows, want 7: %v", len(got), got)
			}
			check := func(ev writer.Event, wantPayload string, topic, part, typ, headers *string) {
				t.Helper()
				s, ok := got[ev.Key]
				if !ok {
					t.Fatalf("no row for key %s", ev.Key)
				}
				if s.Payload != wantPayload || !eq(s.Topic, topic) || !eq(s.Partition, part) || !eq(s.Type, typ) || !eq(s.Headers, headers) || !s.HasID || !s.HasCreated {
					t.Fatalf("row %s = payload %s topic %v partition %v type %v headers %v (id %v, created_at %v)",
						ev.Key, s.Payload, s.Topic, s.Partition, s.Type, s.Headers, s.HasID, s.HasCreated)
				}
			}
			check(full, `{"a": "x", "b": [1, 2]}`, ptr("orders"), ptr("customer-7"), ptr("order.created"), ptr(`{"trace": "t1", "tenant": "acme"}`))
			check(minimal, `"just a string"`, nil, nil, nil, nil)
			for i, ev := range batch {
				var topic, headers *string
				if i%2 == 0 {
					topic = ptr("t")
				} else {
					headers = ptr(fmt.Sprintf(`{"i": "%d"}`, i))
				}
				check(ev, fmt.Sprintf(`{"n": %d}`, i), topic, nil, nil, headers)
			}
		})
	}
}

func TestDuplicateKeyIsTyped(t *testing.T) {
	for _, v := range vias {
		t.Run(v.name, func(t *testing.T) {
			d := newDB(t)
			first := writer.Event{Key: writer.DeriveKey("account/a1/debit", 7), Payload: []byte(`{"amount": 30}`)}
			if err := v.run(t, d, func(insert, _ func([]writer.Event) error, _ func(string, ...any) error) error {
				return insert([]writer.Event{first})
			}); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				name  string
				batch bool
				evs   []writer.Event
			}{
				{"insert", false, []writer.Event{first}},
				{"batch via " + v.batch, true, []writer.Event{{Key: "new-1", Payload: []byte(`1`)}, first, {Key: "new-2", Payload: []byte(`2`)}}},
			} {
				err := v.run(t, d, func(insert, batch func([]writer.Event) error, _ func(string, ...any) error) error {
					if tc.batch {
						return batch(tc.evs)
					}
					return insert(tc.evs)
				})
				var dk *writer.DuplicateKeyError
				if !errors.As(err, &dk) || !errors.Is(err, writer.ErrDuplicateKey) {
					t.Fatalf("%s: err = %v, want a *DuplicateKeyError", tc.name, err)
				}
				if dk.Key != first.Key || dk.Constraint == "" || dk.Table != `"`+d.Schema+`"."outbox"` || !strings.Contains(err.Error(), first.Key) {
					t.Fatalf("%s: %+v, want key %s, the constraint and the table", tc.name, dk, first.Key)
				}
			}
			if n := d.count(t, "outbox", "true"); n != 1 {
				t.Fatalf("%d outbox rows after the duplicates, want the first only", n)
			}
		})
	}
}

// TestRefusedEventNeverReachesTheDatabase: a refused event leaves the
// transaction usable. Had the statement been sent, PostgreSQL would have
// aborted the transaction and the commit would fail.
func TestRefusedEventNeverReachesTheDatabase(t *testing.T) {
	for _, v := range vias {
		t.Run(v.name, func(t *testing.T) {
			d := newDB(t)
			good := writer.Event{Key: writer.NewKey(), Payload: []byte(`{"ok": true}`)}
			err := v.run(t, d, func(insert, batch func([]writer.Event) error, exec func(string, ...any) error) error {
				if err := exec(`INSERT INTO ` + d.Schema + `.accounts VALUES ('a1', 100)`); err != nil {
					return err
				}
				for _, bad := range [][]writer.Event{
					{{Key: writer.NewKey(), Payload: []byte(`{"amount": 30`)}},
					{{Key: "", Payload: []byte(`{}`)}},
					{{Key: writer.NewKey(), Payload: []byte(`{}`), Headers: map[string]string{"outbox_id": "x"}}},
				} {
					if err := insert(bad); !errors.Is(err, writer.ErrInvalidEvent) {
						return fmt.Errorf("insert %+v: err = %v, want ErrInvalidEvent", bad[0], err)
					}
					if err := batch(append([]writer.Event{{Key: writer.NewKey(), Payload: []byte(`1`)}}, bad...)); !errors.Is(err, writer.ErrInvalidEvent) {
						return fmt.Errorf("batch with %+v: err = %v, want ErrInvalidEvent", bad[0], err)
					}
				}
				return insert([]writer.Event{good})
			})
			if err != nil {
				t.Fatal(err)
			}
			if d.count(t, "accounts", "id = 'a1'") != 1 || d.count(t, "outbox", "true") != 1 || d.count(t, "outbox", "idempotency_key = $1", good.Key) != 1 {
				t.Fatalf("after refusals: accounts %d, outbox %d rows; want the business row and the good event only",
					d.count(t, "accounts", "true"), d.count(t, "outbox", "true"))
			}
		})
	}
}

// TestBusinessAndOutboxRowsCommitTogether: committed, both rows exist;
// rolled back, or the connection killed between the two inserts, neither.
func TestBusinessAndOutboxRowsCommitTogether(t *testing.T) {
	for _, v := range vias {
		t.Run(v.name, func(t *testing.T) {
			d := newDB(t)
			ctx := context.Background()
			debit := func(account string, kill bool) error {
				return v.run(t, d, func(insert, _ func([]writer.Event) error, exec func(string, ...any) error) error {
					if err := exec(`INSERT INTO `+d.Schema+`.accounts (id, balance) VALUES ($1, 100)`, account); err != nil {
						return err
					}
					if kill {
						// This transaction's backend, found by what only it has locked.
						var pid int
						err := d.Pool.QueryRow(ctx, `SELECT l.pid FROM pg_locks l WHERE l.relation = $1::regclass AND l.mode = 'RowExclusiveLock' AND l.pid <> pg_backend_pid()`,
							d.Schema+".accounts").Scan(&pid)
						if err != nil {
							t.Fatalf("find the transaction's backend: %v", err)
						}
						var ok bool
						if err := d.Pool.QueryRow(ctx, `SELECT pg_terminate_backend($1, 30000)`, pid).Scan(&ok); err != nil || !ok {
							t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
						}
					}
					return insert([]writer.Event{{Key: writer.DeriveKey("account/"+account+"/debit", 1), Payload: []byte(`{"event": "account.debited", "account": "` + account + `"}`)}})
				})
			}
			if err := debit("committed", false); err != nil {
				t.Fatal(err)
			}
			if err := debit("killed", true); err == nil {
				t.Fatal("the transaction whose connection was killed committed")
			}
			if err := v.run(t, d, func(insert, _ func([]writer.Event) error, exec func(string, ...any) error) error {
				if err := exec(`INSERT INTO ` + d.Schema + `.accounts VALUES ('rolled-back', 100)`); err != nil {
					return err
				}
				if err := insert([]writer.Event{{Key: writer.NewKey(), Payload: []byte(`{"account": "rolled-back"}`)}}); err != nil {
					return err
				}
				return errRollback
			}); !errors.Is(err, errRollback) {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				account string
				want    int
			}{{"committed", 1}, {"killed", 0}, {"rolled-back", 0}} {
				acc := d.count(t, "accounts", "id = $1", tc.account)
				ob := d.count(t, "outbox", "payload->>'account' = $1", tc.account)
				if acc != tc.want || ob != tc.want {
					t.Errorf("account %s: %d business rows, %d outbox rows; want %d of each", tc.account, acc, ob, tc.want)
				}
			}
		})
	}
}

var errRollback = errors.New("rolled back on purpose")

// TestInsertBatchSQLSplitsAtTheParameterLimit: a batch above one
// statement's 65535 parameters is written whole, in statements of
// MaxRowsPerStatement events.
func TestInsertBatchSQLSplitsAtTheParameterLimit(t *testing.T) {
	d := newDB(t)
	evs := make([]writer.Event, writer.MaxRowsPerStatement+5)
	for i := range evs {
		evs[i] = writer.Event{Key: writer.NewKey(), Payload: fmt.Appendf(nil, `{"i": %d}`, i)}
	}
	v := vias[1]
	if err := v.run(t, d, func(_, batch func([]writer.Event) error, _ func(string, ...any) error) error { return batch(evs) }); err != nil {
		t.Fatal(err)
	}
	if n := d.count(t, "outbox", "true"); n != len(evs) {
		t.Fatalf("%d rows, want %d", n, len(evs))
	}
	if n := d.count(t, "outbox", "idempotency_key = $1 AND payload = $2::jsonb", evs[len(evs)-1].Key, evs[len(evs)-1].Payload); n != 1 {
		t.Fatal("the last event of the batch is missing")
	}
}

type (
	pgxTx = pgx.Tx
	sqlTx = *sql.Tx
)
