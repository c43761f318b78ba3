package main

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/migrations"
)

func newMigrateCommand() *cobra.Command {
	var printSQL bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the outbox, quarantine and publication (idempotent)",
		Long: "migrate creates or upgrades, in one idempotent run:\n" +
			"  - the outbox table (postgres.table), left alone with mapping.profile=debezium (the table is yours);\n" +
			"  - the quarantine (postgres.poison_table), whose triggers refuse DELETE and TRUNCATE;\n" +
			"  - walpost's own tables (walpost_position, the schema version table);\n" +
			"  - the publication (postgres.publication) FOR TABLE postgres.table WITH (publish = 'insert').\n" +
			"It prints the versions it applied, or that the schema is up to date.\n\n" +
			"--print-sql prints the SQL instead, rendered for the configured names, and connects nowhere:\n" +
			"every migration's statements in version order (what an empty database gets; a database\n" +
			"migrated before skips the versions it has), then the publication's CREATE, run only when it\n" +
			"does not exist. Review it, or apply it with your own migration tool.",
		Example: "  walpost migrate --postgres-url postgres://walpost:secret@db:5432/app\n\n" +
			"  # the SQL for a change review, with custom table names\n" +
			"  WALPOST_POSTGRES_TABLE=events.outbox walpost migrate --print-sql > walpost.sql",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			need := config.NeedPostgres
			if printSQL {
				need = config.NeedNothing
			}
			cfg, err := loadConfigFor(cmd, need)
			if err != nil {
				return err
			}
			names := migrations.Names{
				Outbox:      cfg.Postgres.Table,
				Poison:      cfg.Postgres.PoisonTable,
				Publication: cfg.Postgres.Publication,
				UserOutbox:  cfg.Mapping.Profile == config.ProfileDebezium,
			}
			if printSQL {
				return writeMigrationSQL(cmd.OutOrStdout(), names)
			}
			return migrate(cmd.Context(), cmd.OutOrStdout(), cfg, names)
		},
	}
	cmd.Flags().BoolVar(&printSQL, "print-sql", false, "print the SQL migrate would run on an empty database, for review; connect nowhere")
	addConfigFlags(cmd, flagsPostgres|flagsLog)
	return cmd
}

// migrate connects, applies the pending migrations and creates the
// publication when it is missing. It connects first, so an unreachable
// server is reported as such rather than as a failed migration.
func migrate(ctx context.Context, out io.Writer, cfg *config.Config, names migrations.Names) error {
	conn, err := pgx.Connect(ctx, cfg.Postgres.URL)
	if err != nil {
		return redact.Error(fmt.Errorf("migrate: %w", postgresConnectError(err)))
	}
	defer conn.Close(context.Background())
	res, err := migrations.Up(ctx, cfg.Postgres.URL, names, nil)
	if err != nil {
		return redact.Error(fmt.Errorf("migrate: %w", err))
	}
	// The migration creates the publication when it first runs for
	// these tables; one renamed since is created here, before any slot.
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, cfg.Postgres.Publication).Scan(&exists); err != nil {
		return redact.Error(fmt.Errorf("migrate: read pg_publication: %w", err))
	}
	if !exists {
		if _, err := conn.Exec(ctx, createPublicationSQL(cfg)); err != nil {
			return fmt.Errorf("migrate: create publication: %w", err)
		}
	}
	if len(res.Applied) == 0 {
		fmt.Fprintf(out, "schema up to date (version %d)\n", res.Version)
	} else {
		fmt.Fprintf(out, "applied %v; schema version %d\n", res.Applied, res.Version)
	}
	return nil
}

func createPublicationSQL(cfg *config.Config) string {
	return fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert')",
		pgx.Identifier{cfg.Postgres.Publication}.Sanitize(), cfg.Postgres.Table)
}

// writeMigrationSQL prints every migration's Up SQL for names, then the
// publication's CREATE (migrate --print-sql).
func writeMigrationSQL(w io.Writer, names migrations.Names) error {
	scripts, err := migrations.UpSQL(names)
	if err != nil {
		return err
	}
	for _, s := range scripts {
		if _, err := fmt.Fprintf(w, "-- walpost migrate: %s\n%s\n", s.Name, s.SQL); err != nil {
			return err
		}
	}
	cfg := &config.Config{Postgres: config.Postgres{Publication: names.Publication, Table: names.Outbox}}
	_, err = fmt.Fprintf(w, "-- walpost migrate: the publication, when it does not exist\n%s;\n", createPublicationSQL(cfg))
	return err
}
