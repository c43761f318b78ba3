package main

import (
	"github.com/spf13/cobra"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/status"
)

func newStatusCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the slot, publication, outbox, poison table and topic at a glance",
		Long: "status prints the replication slot (active, pid, confirmed and restart LSN, lag, retained\n" +
			"WAL, wal_status, safe WAL size), the publication, an estimate of the outbox row count, the\n" +
			"poison table's pending and replayed counts, and the topic's partitions and end offsets.\n" +
			"Parts that cannot be read (no slot yet, Kafka unreachable) are reported as such and the\n" +
			"command still exits 0; it exits 1 only when PostgreSQL is unreachable or the config is invalid.\n\n" +
			"--json prints the same report with snake_case keys; a value that could not be read is null.\n" +
			"When the report cannot be made at all (PostgreSQL unreachable, an invalid config) --json\n" +
			"prints {\"error\": \"…\"} on stdout, the message on stderr, and exits 1.",
		Example: "  walpost status\n\n" +
			"  # the slot's lag in bytes, for a script or an alert\n" +
			"  walpost status --json | jq .slot.lag_bytes",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := func() error {
				cfg, err := loadConfigFor(cmd, config.NeedPostgres)
				if err != nil {
					return err
				}
				r, err := status.Gather(cmd.Context(), cfg)
				if err != nil {
					return err
				}
				if asJSON {
					return r.WriteJSON(cmd.OutOrStdout())
				}
				return r.WriteText(cmd.OutOrStdout())
			}()
			if err != nil && asJSON {
				// A script reading stdout gets an object either way.
				_ = writeJSON(cmd.OutOrStdout(), map[string]string{"error": redact.String(oneLine(err.Error()))})
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print JSON; {"error": "…"} and exit 1 when the report cannot be made`)
	addConfigFlags(cmd, flagsPostgres|flagsKafka|flagsLog)
	return cmd
}
