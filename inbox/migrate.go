package inbox

import (
	"context"
	_ "embed" // the schema
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// SQL creates the inbox's two tables, inbox_watermark and inbox_key, in
// the first schema of the search_path, if they do not exist. Run it with
// Migrate, or apply it with the application's own migrations.
//
//go:embed schema.sql
var SQL string

// Execer runs a statement: a *pgxpool.Pool, *pgx.Conn or pgx.Tx.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Migrate runs SQL on db. It is idempotent.
func Migrate(ctx context.Context, db Execer) error {
	if _, err := db.Exec(ctx, SQL); err != nil {
		return fmt.Errorf("inbox: create its tables: %w", err)
	}
	return nil
}
