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
		Long: "run streams the outbox table's inserts from the replication slot (postgres.slot) and produces\n" +
			"each as a Kafka record (kafka.topic, or the row's topic column), in commit order, confirming a\n" +
			"transaction to PostgreSQL only once Kafka acknowledged every record of it. It creates the slot on\n" +
			"a first install, serves /metrics, /healthz and /readyz on http.listen, and runs in the\n" +
			"foreground until SIGINT or SIGTERM: then it finishes the open transaction, waits for the acks,\n" +
			"confirms and exits 0 (within kafka.flush_timeout); a second signal exits at once (130).\n\n" +
			"Records Kafka keeps refusing go to the poison table (walpost poison). A fatal error (the slot\n" +
			"lost, the schema wrong) exits 1; an unreachable server is retried with backoff. Run\n" +
			"walpost check first: it tells what run would refuse.",
		Example: "  walpost run --postgres-url postgres://walpost:secret@db:5432/app --kafka-brokers kafka-1:9092,kafka-2:9092\n\n" +
			"  # from a file, with JSON logs\n" +
			"  walpost run --config /etc/walpost/walpost.yaml --log-format json",
		Args: cobra.NoArgs,
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
