package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/forwarder"
	"github.com/walpost/walpost/internal/redact"
)

func newRunCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Forward outbox inserts from the replication slot to Kafka (foreground)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfigFor(cmd, config.NeedAll)
			if err != nil {
				return err
			}
			logger := newLogger(os.Stderr, cfg.Log)
			forwarder.ApplyMemoryLimit(cfg, logger)
			forwarder.ApplyProcs(logger)
			b := build()
			f, err := forwarder.New(cfg, forwarder.Deps{Logger: logger, Build: forwarder.Build{Version: b.Version, Commit: b.Commit}})
			if err != nil {
				return err
			}
			if err := f.Run(cmd.Context()); err != nil {
				logger.Error("walpost stopped", "err", redact.String(err.Error()))
				return &exitError{code: 1, err: err}
			}
			return nil
		},
	}
	addConfigFlags(cmd, flagsAll)
	return cmd
}
