// Package migrations holds walpost's schema as embedded SQL and applies it
// with goose. The schema is the contract of DESIGN.md, Contracts: the outbox table,
// the poison_outbox quarantine with a trigger that refuses DELETE and
// TRUNCATE, and the publication that covers exactly the outbox's inserts.
// The SQL files name the default schema; Up renders them for Names: the
// tables and the publication are the configured ones, and a user's own
// outbox table (the debezium profile) is left alone.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
	"strings"
	"testing/fstest"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/pressly/goose/v3"
)

//go:embed *.sql
var files embed.FS

// Names are the objects the migrations create. The zero value is the
// default schema: outbox, poison_outbox, walpost_outbox.
type Names struct {
	// Outbox is the outbox table (postgres.table), optionally
	// schema-qualified. Default "outbox".
	Outbox string
	// Poison is the quarantine table (postgres.poison_table), optionally
	// schema-qualified. Default "poison_outbox".
	Poison string
	// Publication is created FOR TABLE Outbox when missing
	// (postgres.publication). Default "walpost_outbox".
	Publication string
	// UserOutbox leaves the outbox table alone: it is the user's (the
	// debezium profile), so only the publication, the quarantine and
	// walpost's own tables are created.
	UserOutbox bool
}

func (n Names) withDefaults() Names {
	if n.Outbox == "" {
		n.Outbox = "outbox"
	}
	if n.Poison == "" {
		n.Poison = "poison_outbox"
	}
	if n.Publication == "" {
		n.Publication = "walpost_outbox"
	}
	return n
}

// versionTable is where goose records the migrations applied for n: one
// per quarantine table, since the migrations create and alter it.
func (n Names) versionTable() string {
	if n.Poison == "poison_outbox" {
		return VersionTable
	}
	return VersionTable + "_" + strings.ReplaceAll(n.Poison, ".", "_")
}

// FS returns the migration files rendered for the default Names.
func FS() fs.FS {
	fsys, err := render(Names{}.withDefaults())
	if err != nil {
		panic(err) // only a read of the embedded files can fail
	}
	return fsys
}

// schemaNames are the default names in the SQL files: the quarantine's
// index and constraint names, the tables and the publication.
var schemaNames = regexp.MustCompile(`\b(poison_outbox_(?:created_at|pkey|idempotency_key)|poison_outbox|walpost_outbox|outbox)\b`)

// userOutbox is the outbox's CREATE TABLE, between its marker comments.
var userOutbox = regexp.MustCompile(`(?s)-- walpost:outbox-table begin.*?-- walpost:outbox-table end\n`)

// render returns the embedded SQL files for n: the default names replaced
// by n's in one pass (the files stay plain SQL for the default schema, so
// walpost lint and psql read them), and the outbox's CREATE TABLE left out
// when n.UserOutbox.
func render(n Names) (fs.FS, error) {
	names, err := fs.Glob(files, "*.sql")
	if err != nil {
		return nil, err
	}
	_, base, ok := strings.Cut(n.Poison, ".")
	if !ok {
		base = n.Poison
	}
	out := fstest.MapFS{}
	for _, name := range names {
		b, err := fs.ReadFile(files, name)
		if err != nil {
			return nil, err
		}
		if n.UserOutbox {
			b = userOutbox.ReplaceAll(b, nil)
		}
		b = schemaNames.ReplaceAllFunc(b, func(m []byte) []byte {
			switch s := string(m); s {
			case "poison_outbox":
				return []byte(n.Poison)
			case "walpost_outbox":
				return []byte(n.Publication)
			case "outbox":
				return []byte(n.Outbox)
			default:
				return []byte(base + strings.TrimPrefix(s, "poison_outbox"))
			}
		})
		out[name] = &fstest.MapFile{Data: b, Mode: 0o444}
	}
	return out, nil
}

// VersionTable records which migrations have been applied to the default
// quarantine table; another one has its own, VersionTable_<table>.
const VersionTable = "walpost_schema_version"

// Result is what Up did.
type Result struct {
	Applied []int64 // versions applied by this call
	Version int64   // schema version after the call
}

// Up applies every pending migration for names; applying twice is a no-op.
func Up(ctx context.Context, connString string, names Names, logger *slog.Logger) (Result, error) {
	names = names.withDefaults()
	fsys, err := render(names)
	if err != nil {
		return Result{}, fmt.Errorf("load migrations: %w", err)
	}
	if _, err := pgconn.ParseConfig(connString); err != nil {
		return Result{}, fmt.Errorf("parse connection string: %w", err)
	}
	db, err := sql.Open("pgx", connString)
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	opts := []goose.ProviderOption{goose.WithTableName(names.versionTable())}
	if logger != nil {
		opts = append(opts, goose.WithSlog(logger))
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, opts...)
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
