// Package migrations holds walpost's schema as embedded SQL and applies it
// with goose. The schema is the contract of DESIGN.md, Contracts: the outbox table,
// the poison_outbox quarantine with a trigger that refuses DELETE and
// TRUNCATE, and the publication that covers exactly the outbox's inserts.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/pressly/goose/v3"
)

//go:embed *.sql
var files embed.FS

// FS returns the embedded migration files.
func FS() fs.FS { return files }

// VersionTable records which migrations have been applied.
const VersionTable = "walpost_schema_version"

// Result is what Up did.
type Result struct {
	Applied []int64 // versions applied by this call
	Version int64   // schema version after the call
}

// Up applies every pending migration; applying twice is a no-op.
func Up(ctx context.Context, connString string, logger *slog.Logger) (Result, error) {
	if _, err := pgconn.ParseConfig(connString); err != nil {
		return Result{}, fmt.Errorf("parse connection string: %w", err)
	}
	db, err := sql.Open("pgx", connString)
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	opts := []goose.ProviderOption{goose.WithTableName(VersionTable)}
	if logger != nil {
		opts = append(opts, goose.WithSlog(logger))
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, opts...)
	if err != nil {
		return Result{}, fmt.Errorf("load migrations: %w", err)
	}
	res, err := p.Up(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("apply migrations: %w", err)
	}
	var out Result
	for _, r := range res {
		out.Applied = append(out.Applied, r.Source.Version)
	}
	out.Version, err = p.GetDBVersion(ctx)
	if err != nil {
		return out, fmt.Errorf("read schema version: %w", err)
	}
	return out, nil
}
