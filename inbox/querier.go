package inbox

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
)

// querier is what the inbox needs of a transaction, pgx's or
// database/sql's.
type querier interface {
	// queryEach calls each for every row, with the row's Scan.
	queryEach(ctx context.Context, sql string, args []any, each func(scan func(...any) error) error) error
	exec(ctx context.Context, sql string, args ...any) (rowsAffected int64, err error)
}

type pgxQuerier struct{ tx pgx.Tx }

func (q pgxQuerier) queryEach(ctx context.Context, s string, args []any, each func(func(...any) error) error) error {
	rows, err := q.tx.Query(ctx, s, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (q pgxQuerier) exec(ctx context.Context, s string, args ...any) (int64, error) {
	t, err := q.tx.Exec(ctx, s, args...)
	return t.RowsAffected(), err
}

type sqlQuerier struct{ tx *sql.Tx }

func (q sqlQuerier) queryEach(ctx context.Context, s string, args []any, each func(func(...any) error) error) error {
	rows, err := q.tx.QueryContext(ctx, s, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (q sqlQuerier) exec(ctx context.Context, s string, args ...any) (int64, error) {
	r, err := q.tx.ExecContext(ctx, s, args...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}
