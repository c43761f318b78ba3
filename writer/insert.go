package writer

import (
	"context"
	"database/sql"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// MaxRowsPerStatement is how many events one INSERT of InsertBatchSQL
// carries: PostgreSQL's 65535 parameters per statement, six per event.
const MaxRowsPerStatement = 65535 / 6

// Insert writes ev into DefaultTable ("outbox") in tx. See Table.Insert.
func Insert(ctx context.Context, tx pgx.Tx, ev Event) error { return DefaultTable.Insert(ctx, tx, ev) }

// InsertBatch writes evs into DefaultTable in tx. See Table.InsertBatch.
func InsertBatch(ctx context.Context, tx pgx.Tx, evs []Event) error {
	return DefaultTable.InsertBatch(ctx, tx, evs)
}

// InsertSQL writes ev into DefaultTable in tx. See Table.InsertSQL.
func InsertSQL(ctx context.Context, tx *sql.Tx, ev Event) error {
	return DefaultTable.InsertSQL(ctx, tx, ev)
}

// InsertBatchSQL writes evs into DefaultTable in tx. See
// Table.InsertBatchSQL.
func InsertBatchSQL(ctx context.Context, tx *sql.Tx, evs []Event) error {
	return DefaultTable.InsertBatchSQL(ctx, tx, evs)
}

// Insert writes ev into t with one INSERT in tx, which the caller commits
// together with its business change. A refused event is an *EventError and
// nothing is sent; a key already present is a *DuplicateKeyError.
func (t *Table) Insert(ctx context.Context, tx pgx.Tx, ev Event) error {
	ev.Headers = traceOf(ctx).headers(ev.Headers)
	r, err := encode(0, ev)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, t.insert, r[:]...); err != nil {
		return dbError(t, func() []string { return []string{ev.Key} }, err)
	}
	return nil
}

// InsertBatch writes evs into t with one COPY in tx. Every event is checked
// before anything is sent (an *EventError, also for a key twice in evs); a
// key already present is a *DuplicateKeyError and nothing of the batch is
// written. An empty batch sends nothing.
func (t *Table) InsertBatch(ctx context.Context, tx pgx.Tx, evs []Event) error {
	rows, err := encodeBatch(traceOf(ctx), evs)
	if err != nil || len(rows) == 0 {
		return err
	}
	i := 0
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if i == len(rows) {
			return nil, nil
		}
		i++
		return rows[i-1][:], nil
	})
	if _, err := tx.CopyFrom(ctx, t.ident, columns, src); err != nil {
		return dbError(t, keysOf(evs), err)
	}
	return nil
}

// InsertSQL writes ev into t with one INSERT in tx, as Insert does. The
// driver must take PostgreSQL's $n placeholders (pgx's stdlib, lib/pq).
func (t *Table) InsertSQL(ctx context.Context, tx *sql.Tx, ev Event) error {
	ev.Headers = traceOf(ctx).headers(ev.Headers)
	r, err := encode(0, ev)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, t.insert, r[:]...); err != nil {
		return dbError(t, func() []string { return []string{ev.Key} }, err)
	}
	return nil
}

// InsertBatchSQL writes evs into t in tx with one multi-row INSERT per
// MaxRowsPerStatement events, checked as InsertBatch checks them.
func (t *Table) InsertBatchSQL(ctx context.Context, tx *sql.Tx, evs []Event) error {
	rows, err := encodeBatch(traceOf(ctx), evs)
	if err != nil {
		return err
	}
	for len(rows) > 0 {
		n := min(len(rows), MaxRowsPerStatement)
		args := make([]any, 0, n*len(columns))
		for _, r := range rows[:n] {
			args = append(args, r[:]...)
		}
		if _, err := tx.ExecContext(ctx, t.multiInsert(n), args...); err != nil {
			return dbError(t, keysOf(evs), err)
		}
		rows = rows[n:]
	}
	return nil
}

// multiInsert is the INSERT of n rows.
func (t *Table) multiInsert(n int) string {
	var b strings.Builder
	b.Grow(len(t.insert) + n*40)
	b.WriteString("INSERT INTO ")
	b.WriteString(t.quoted)
	b.WriteString(" (")
	b.WriteString(strings.Join(columns, ", "))
	b.WriteString(") VALUES ")
	p := 1
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for c := range columns {
			if c > 0 {
				b.WriteString(", ")
			}
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(p))
			p++
		}
		b.WriteByte(')')
	}
	return b.String()
}

func keysOf(evs []Event) func() []string {
	return func() []string {
		ks := make([]string, len(evs))
		for i, ev := range evs {
			ks[i] = ev.Key
		}
		return ks
	}
}
