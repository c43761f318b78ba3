package main

import (
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/migrations"
)

func newMigrateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the outbox (postgres.table; left alone with the debezium profile), the quarantine (postgres.poison_table), walpost's own tables and the publication (idempotent)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfigFor(cmd, config.NeedPostgres)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			names := migrations.Names{
				Outbox:      cfg.Postgres.Table,
				Poison:      cfg.Postgres.PoisonTable,
				Publication: cfg.Postgres.Publication,
				UserOutbox:  cfg.Mapping.Profile == config.ProfileDebezium,
			}
			res, err := migrations.Up(ctx, cfg.Postgres.URL, names, nil)
			if err != nil {
				return redact.Error(fmt.Errorf("migrate: %w", err))
			}
			// The migration creates the publication when it first runs for
			// these tables; one renamed since is created here, before any slot.
			conn, err := pgx.Connect(ctx, cfg.Postgres.URL)
			if err != nil {
				return redact.Error(fmt.Errorf("migrate: connect: %w", err))
			}
			defer conn.Close(ctx)
			var exists bool
			if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, cfg.Postgres.Publication).Scan(&exists); err != nil {
				return err
			}
			if !exists {
				sql := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert')",
					pgx.Identifier{cfg.Postgres.Publication}.Sanitize(), cfg.Postgres.Table)
				if _, err := conn.Exec(ctx, sql); err != nil {
					return fmt.Errorf("migrate: create publication: %w", err)
				}
			}
			if len(res.Applied) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "schema up to date (version %d)\n", res.Version)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "applied %v; schema version %d\n", res.Applied, res.Version)
			}
			return nil
		},
	}
}
