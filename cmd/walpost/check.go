package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/preflight"
)

func newCheckCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "check",
		Short: "Pre-flight: verify PostgreSQL and Kafka are ready for walpost",
		Long: "check prints one line per check (OK, FAIL with the fix, or SKIP when an\n" +
			"earlier failure makes it moot) and exits 1 when any check fails.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfigFor(cmd, config.NeedAll)
			if err != nil {
				return err
			}
			if failed := preflight.Run(cmd.Context(), cfg, cmd.OutOrStdout()).Failed(); failed > 0 {
				return &exitError{code: 1, err: fmt.Errorf("%d check(s) failed", failed)}
			}
			return nil
		},
	}
}
