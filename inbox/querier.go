package inbox

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
)

// querier is what the inbox needs of a transaction, pgx's or
// database/sql's.
type querier interface {
	queryRow(ctx context.Context, sql string, args ...any) interface{ Scan(...any) error }
	queryStrings(ctx context.Context, sql string, args ...any) ([]string, error)
	exec(ctx context.Context, sql string, args ...any) (rowsAffected int64, err error)
}

type pgxQuerier struct{ tx pgx.Tx }

func (q pgxQuerier) queryRow(ctx context.Context, s string, args ...any) interface{ Scan(...any) error } {
	return q.tx.QueryRow(ctx, s, args...)
}

func (q pgxQuerier) queryStrings(ctx context.Context, s string, args ...any) ([]string, error) {
	rows, err := q.tx.Query(ctx, s, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func (q pgxQuerier) exec(ctx context.Context, s string, args ...any) (int64, error) {
	t, err := q.tx.Exec(ctx, s, args...)
	return t.RowsAffected(), err
}

type sqlQuerier struct{ tx *sql.Tx }

func (q sqlQuerier) queryRow(ctx context.Context, s string, args ...any) interface{ Scan(...any) error } {
	return q.tx.QueryRowContext(ctx, s, args...)
}

func (q sqlQuerier) queryStrings(ctx context.Context, s string, args ...any) ([]string, error) {
	rows, err := q.tx.QueryContext(ctx, s, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func (q sqlQuerier) exec(ctx context.Context, s string, args ...any) (int64, error) {
	r, err := q.tx.ExecContext(ctx, s, args...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}
