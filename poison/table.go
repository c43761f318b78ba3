package poison

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrUnwritable: the poison table cannot take an event and retrying will
// not change that (a missing or mistyped column, no unique key on the
// event's identity, a value a column's type refuses, an identity held by
// another event). The forwarder stops rather than confirm past the event.
var ErrUnwritable = errors.New("the poison table cannot take the event")

// TableError says what is wrong with the poison table, or with one event's
// row, and how to fix it. It wraps ErrUnwritable (errors.Is) and the
// PostgreSQL error, when there is one.
type TableError struct {
	Table   string // sanitized table name
	Column  string // the column at fault; "" when it is not one column
	Key     string // the event's idempotency key; "" for the table's schema
	Problem string
	Fix     string
	Err     error // the PostgreSQL error, if any
}

func (e *TableError) Error() string {
	var b strings.Builder
	b.WriteString("poison table ")
	b.WriteString(e.Table)
	if e.Column != "" {
		fmt.Fprintf(&b, ", column %s", e.Column)
	}
	if e.Key != "" {
		fmt.Fprintf(&b, ", event %q", e.Key)
	}
	b.WriteString(": ")
	b.WriteString(e.Problem)
	if e.Err != nil {
		fmt.Fprintf(&b, " (%v)", e.Err)
	}
	if e.Fix != "" {
		b.WriteString("; fix: ")
		b.WriteString(e.Fix)
	}
	return b.String()
}

// Is makes every TableError an ErrUnwritable.
func (e *TableError) Is(target error) bool { return target == ErrUnwritable }

func (e *TableError) Unwrap() error { return e.Err }

// column is one column walpost writes or reads, with the types it accepts
// (the first is what the migrations create).
type column struct {
	name  string
	types []string
}

var (
	textTypes = []string{"text", "character varying"}
	intTypes  = []string{"integer", "bigint"}
	tsTypes   = []string{"timestamp with time zone"}
	// outbox_id, payload and headers may be text: an outbox whose id is
	// not a uuid, or whose payload is text that is not JSON, needs them.
	jsonTypes = []string{"jsonb", "json", "text"}
	// payload may also be bytea, for an outbox whose payload is bytea
	// (CheckBinaryPayload).
	payloadTypes = []string{"jsonb", "json", "text", "bytea"}
)

// columns are the poison table's columns, in the order of the migration.
var columns = []column{
	{"idempotency_key", textTypes},
	{"outbox_id", []string{"uuid", "text"}},
	{"payload", payloadTypes},
	{"created_at", tsTypes},
	{"topic", textTypes},
	{"partition_key", textTypes},
	{"event_type", textTypes},
	{"headers", jsonTypes},
	{"attempts", intTypes},
	{"last_error", textTypes},
	{"error_class", textTypes},
	{"commit_lsn", []string{"pg_lsn"}},
	{"poisoned_at", tsTypes},
	{"replayed_at", tsTypes},
	{"replay_count", intTypes},
}

// colTypes are the types Put casts its values to.
type colTypes struct {
	outboxID, payload, headers string
}

var defaultTypes = colTypes{outboxID: "uuid", payload: "jsonb", headers: "jsonb"}

func (s *Store) types() colTypes {
	if t := s.checked.Load(); t != nil {
		return *t
	}
	return defaultTypes
}

// Check reads the poison table's columns and keys from the catalog and
// returns a *TableError (ErrUnwritable) naming the first column whose type
// walpost cannot write, a missing column, or a missing unique key on the
// event's identity (outbox_id, commit_lsn), each with its fix; other
// errors (the connection) are returned as they are. Put then casts to the
// types found. The forwarder calls it at the start of every session,
// walpost check (package preflight) reports it.
func (s *Store) Check(ctx context.Context) error {
	t, err := checkTable(ctx, s.pool, s.table)
	if err != nil {
		return err
	}
	s.checked.Store(&t)
	return nil
}

// CheckBinaryPayload is Check for an outbox whose payload column is
// bytea: the poison table's payload column must hold its bytes (bytea)
// or their hex text (text); json and jsonb refuse them, so the first
// quarantined event would stop walpost. A *TableError (ErrUnwritable)
// names the column and the fix.
func (s *Store) CheckBinaryPayload(ctx context.Context) error {
	return checkBinaryPayload(ctx, s.pool, s.table)
}

// CheckBinaryPayloadTable is Store.CheckBinaryPayload for the (optionally
// schema-qualified) table over q: what walpost check reports.
func CheckBinaryPayloadTable(ctx context.Context, q Querier, table string) error {
	return checkBinaryPayload(ctx, q, quoteQualified(table))
}

func checkBinaryPayload(ctx context.Context, q Querier, table string) error {
	t, err := checkTable(ctx, q, table)
	if err != nil {
		return err
	}
	if t.payload == "bytea" || t.payload == "text" {
		return nil
	}
	return &TableError{Table: table, Column: "payload",
		Problem: fmt.Sprintf("has type %s, which cannot hold the outbox's bytea payload: the first quarantined event would stop walpost", t.payload),
		Fix:     fmt.Sprintf("ALTER TABLE %s ALTER COLUMN payload TYPE bytea USING convert_to(payload::text, 'UTF8'), then restart walpost", table)}
}

// Querier is what CheckTable reads the catalog with (*pgx.Conn,
// *pgxpool.Pool).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CheckTable is Store.Check for the (optionally schema-qualified) table
// over q: what walpost check reports.
func CheckTable(ctx context.Context, q Querier, table string) error {
	_, err := checkTable(ctx, q, quoteQualified(table))
	return err
}

// checkTable checks the sanitized table and returns its column types.
func checkTable(ctx context.Context, q Querier, table string) (colTypes, error) {
	var oid uint32
	if err := q.QueryRow(ctx, `SELECT coalesce(to_regclass($1)::oid, 0)`, table).Scan(&oid); err != nil {
		return colTypes{}, fmt.Errorf("read the poison table %s: %w", table, err)
	}
	if oid == 0 {
		return colTypes{}, &TableError{Table: table, Problem: "does not exist",
			Fix: "run walpost migrate (it creates poison_outbox; a poison table of another name is CREATE TABLE " + table + " (LIKE poison_outbox INCLUDING ALL))"}
	}
	rows, err := q.Query(ctx, `SELECT attname, format_type(atttypid, NULL) FROM pg_attribute
		WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped`, oid)
	if err != nil {
		return colTypes{}, fmt.Errorf("read the columns of the poison table %s: %w", table, err)
	}
	have := map[string]string{}
	var name, typ string
	_, err = pgx.ForEachRow(rows, []any{&name, &typ}, func() error {
		have[name] = typ
		return nil
	})
	if err != nil {
		return colTypes{}, fmt.Errorf("read the columns of the poison table %s: %w", table, err)
	}
	t := defaultTypes
	for _, c := range columns {
		typ, ok := have[c.name]
		if !ok {
			return colTypes{}, &TableError{Table: table, Column: c.name, Problem: "is missing",
				Fix: fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s %s (see migrations/00001_outbox.sql for its definition), then restart walpost", table, pgx.Identifier{c.name}.Sanitize(), c.types[0])}
		}
		if !slices.Contains(c.types, typ) {
			return colTypes{}, &TableError{Table: table, Column: c.name,
				Problem: fmt.Sprintf("has type %s; walpost writes %s", typ, strings.Join(c.types, " or ")),
				Fix: fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s TYPE %s USING %s::text::%s, then restart walpost",
					table, pgx.Identifier{c.name}.Sanitize(), c.types[0], pgx.Identifier{c.name}.Sanitize(), c.types[0])}
		}
		switch c.name {
		case "outbox_id":
			t.outboxID = typ
		case "payload":
			t.payload = typ
		case "headers":
			t.headers = typ
		}
	}
	// Unique keys: one on exactly (outbox_id, commit_lsn), none on
	// anything else (a key on idempotency_key refuses a second event with
	// the key, the bug migration 00002 removed).
	rows, err = q.Query(ctx, `SELECT c.relname, array(SELECT a.attname::text FROM unnest(i.indkey) k JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k ORDER BY a.attname)
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = $1 AND i.indisunique AND i.indpred IS NULL`, oid)
	if err != nil {
		return colTypes{}, fmt.Errorf("read the indexes of the poison table %s: %w", table, err)
	}
	var index string
	var cols []string
	identityKey := false
	var other []string
	_, err = pgx.ForEachRow(rows, []any{&index, &cols}, func() error {
		if slices.Equal(cols, []string{"commit_lsn", "outbox_id"}) {
			identityKey = true
		} else {
			other = append(other, fmt.Sprintf("%s on (%s)", index, strings.Join(cols, ", ")))
		}
		return nil
	})
	if err != nil {
		return colTypes{}, fmt.Errorf("read the indexes of the poison table %s: %w", table, err)
	}
	const upgrade = "run walpost migrate (migration 00002 keys poison_outbox by (outbox_id, commit_lsn)); for a poison table of another name: ALTER TABLE %s DROP CONSTRAINT <its primary key>, ALTER COLUMN outbox_id SET NOT NULL, ADD PRIMARY KEY (outbox_id, commit_lsn)"
	if len(other) > 0 {
		return colTypes{}, &TableError{Table: table,
			Problem: fmt.Sprintf("has the unique index %s, which refuses a second event with one idempotency key", strings.Join(other, ", ")),
			Fix:     fmt.Sprintf(upgrade, table)}
	}
	if !identityKey {
		return colTypes{}, &TableError{Table: table, Column: "outbox_id",
			Problem: "has no unique key on the event's identity (outbox_id, commit_lsn)",
			Fix:     fmt.Sprintf(upgrade, table)}
	}
	return t, nil
}

// permanent: a PostgreSQL error from the insert that retrying cannot cure:
// data exceptions (class 22), integrity violations (23) and syntax or
// access rule violations (42), except a missing privilege (42501), which an
// operator grants while walpost retries.
func permanent(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) != 5 || pgErr.Code == "42501" {
		return false
	}
	switch pgErr.Code[:2] {
	case "22", "23", "42":
		return true
	}
	return false
}

// explain turns a permanent insert error into a *TableError naming the
// column: PostgreSQL's own column name when it gives one, else the first
// value that does not cast to its column's type (asked one at a time).
func (s *Store) explain(ctx context.Context, key string, t colTypes, err error, id, payload *string, created string, headers *string, lsn string) error {
	var pgErr *pgconn.PgError
	errors.As(err, &pgErr)
	te := &TableError{Table: s.table, Key: key, Column: pgErr.ColumnName, Err: err,
		Problem: "the insert of the event's row is refused (SQLSTATE " + pgErr.Code + ", not retried)"}
	if te.Column == "" && pgErr.Code[:2] == "22" {
		values := []struct {
			col, typ string
			v        *string
		}{
			{"outbox_id", t.outboxID, id}, {"payload", t.payload, payload},
			{"created_at", "timestamptz", &created}, {"headers", t.headers, headers}, {"commit_lsn", "pg_lsn", &lsn},
		}
		for _, v := range values {
			var ignored any
			if qerr := s.pool.QueryRow(ctx, fmt.Sprintf(`SELECT $1::text::%s::text`, v.typ), v.v).Scan(&ignored); qerr != nil && permanent(qerr) {
				te.Column = v.col
				te.Problem = fmt.Sprintf("the event's %s does not cast to the column's type %s (SQLSTATE %s, not retried)", v.col, v.typ, pgErr.Code)
				break
			}
		}
	}
	switch te.Column {
	case "outbox_id", "payload", "headers":
		te.Fix = fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s TYPE text (or make the outbox's values fit), then restart walpost: it quarantines the event again", s.table, te.Column)
	case "":
		te.Fix = "walpost check names what is wrong with the poison table; fix it, then restart walpost"
	default:
		te.Fix = fmt.Sprintf("make the outbox's %s fit the poison table's column (walpost check), then restart walpost", te.Column)
	}
	return te
}

// Recent returns how long ago each row of the table was quarantined, for
// the rows quarantined within window (oldest first), by the database's
// clock: the breaker (forwarder's isolator) counts them after a restart.
func (s *Store) Recent(ctx context.Context, window time.Duration) ([]time.Duration, error) {
	rows, err := s.pool.Query(ctx, fmt.Sprintf(`SELECT extract(epoch FROM now() - poisoned_at)::float8 FROM %s
		WHERE poisoned_at > now() - make_interval(secs => $1) ORDER BY poisoned_at`, s.table), window.Seconds())
	if err != nil {
		return nil, fmt.Errorf("count recent quarantines in %s: %w", s.table, err)
	}
	var ages []time.Duration
	var secs float64
	_, err = pgx.ForEachRow(rows, []any{&secs}, func() error {
		ages = append(ages, max(0, time.Duration(secs*float64(time.Second))))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count recent quarantines in %s: %w", s.table, err)
	}
	return ages, nil
}
