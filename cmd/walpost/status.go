package main

import (
	"github.com/spf13/cobra"

	"github.com/walpost/walpost/config"
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
			"command still exits 0; it exits 1 only when PostgreSQL is unreachable or the config is invalid.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
