package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/poison"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink/kafka"
)

func newPoisonCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "poison",
		Short: "Inspect and replay events quarantined in the poison table",
		Long: "An event Kafka keeps refusing (too large, an invalid header, a NULL payload) is quarantined in\n" +
			"postgres.poison_table after poison.max_attempts, so the events after it keep flowing. poison list\n" +
			"shows them; poison replay sends them again once the cause is fixed. Rows are never deleted.",
		Example: "  walpost poison list\n" +
			"  walpost poison replay --key order-42",
	}
	cmd.AddCommand(newPoisonListCommand(), newPoisonReplayCommand())
	return cmd
}

func openPoisonStore(cmd *cobra.Command, cfg *config.Config) (*poison.Store, func(), error) {
	pool, err := replication.NewPool(cmd.Context(), cfg.Postgres.URL)
	if err != nil {
		return nil, nil, redact.Error(fmt.Errorf("postgres.url: %w", err))
	}
	// The pool connects lazily: connect now, so that an unreachable server
	// is reported as such, not as a failed read of the poison table.
	if err := pool.Ping(cmd.Context()); err != nil {
		pool.Close()
		return nil, nil, redact.Error(postgresConnectError(err))
	}
	return poison.NewStore(pool, cfg.Postgres.PoisonTable), pool.Close, nil
}

func newPoisonListCommand() *cobra.Command {
	var asJSON bool
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List quarantined events in created_at order",
		Long: "list prints the rows of postgres.poison_table in created_at order: the key, the topic, the\n" +
			"attempts, the error class and message, when it was quarantined and when replayed. --json adds\n" +
			"outbox_id (with commit_lsn it identifies a row: one key may have several).",
		Example: "  walpost poison list\n" +
			"  walpost poison list --json --limit 20 | jq -r '.[].idempotency_key'",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfigFor(cmd, config.NeedPostgres)
			if err != nil {
				return err
			}
			store, closeFn, err := openPoisonStore(cmd, cfg)
			if err != nil {
				return err
			}
			defer closeFn()
			rows, err := store.List(cmd.Context(), poison.Filter{All: true, Limit: limit})
			if err != nil {
				return redact.Error(fmt.Errorf("%w", err))
			}
			return poison.WriteList(cmd.OutOrStdout(), rows, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most N rows (0: all)")
	addConfigFlags(cmd, flagsPostgres|flagsLog)
	return cmd
}

func newPoisonReplayCommand() *cobra.Command {
	var keys []string
	var all, dryRun, force bool
	cmd := &cobra.Command{
		Use:   "replay (--key K... | --all)",
		Short: "Re-produce quarantined events with their original key, in created_at order",
		Long: "replay re-produces rows of the poison table through the idempotent producer, with the\n" +
			"original key, value and headers plus a replayed_from_poison header. Each replayed row gets\n" +
			"replayed_at and replay_count; rows are never deleted. --key K replays every row of K (one per\n" +
			"quarantined event with that key). Rows already replayed are skipped\n" +
			"unless --force. A row that fails again keeps its row with the new error, and the command\n" +
			"exits 1.",
		Example: "  # what would be sent\n" +
			"  walpost poison replay --all --dry-run\n\n" +
			"  walpost poison replay --key order-42 --key order-43\n\n" +
			"  # again, rows already replayed included\n" +
			"  walpost poison replay --all --force",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if all == (len(keys) > 0) {
				return usageError(errors.New("give either --all or one or more --key"))
			}
			cfg, err := loadConfigFor(cmd, config.NeedAll)
			if err != nil {
				return err
			}
			store, closeFn, err := openPoisonStore(cmd, cfg)
			if err != nil {
				return err
			}
			defer closeFn()
			ctx := cmd.Context()
			rows, err := store.List(ctx, poison.Filter{Keys: keys, All: force})
			if err != nil {
				return redact.Error(fmt.Errorf("%w", err))
			}
			out := cmd.OutOrStdout()
			if len(keys) > 0 {
				found := map[string]bool{}
				for _, r := range rows {
					found[r.IdempotencyKey] = true
				}
				for _, k := range keys {
					if !found[k] {
						fmt.Fprintf(out, "skipped %s: not in %s, or already replayed (use --force)\n", k, cfg.Postgres.PoisonTable)
					}
				}
			}
			if len(rows) == 0 {
				fmt.Fprintln(out, "nothing to replay")
				return nil
			}
			logger := newLogger(cmd.ErrOrStderr(), cfg.Log)
			// One record at a time: no linger.
			k, err := commandSink(cmd.Context(), cfg, logger, "-replay", func(kcfg *kafka.Config) { kcfg.Linger, kcfg.MaxBufferedRecords = 0, 0 })
			if err != nil {
				return err
			}
			defer k.Close()
			r := &poison.Replayer{Store: store, Sink: k, Logger: logger, Out: func(s string) { fmt.Fprintln(out, s) }}
			res, err := r.Replay(ctx, rows, dryRun)
			if err != nil {
				return err
			}
			if dryRun {
				fmt.Fprintf(out, "dry run: %d row(s) would be replayed\n", len(rows))
				return nil
			}
			fmt.Fprintf(out, "replayed %d, failed %d\n", res.Replayed, res.Failed)
			if res.Failed > 0 {
				return &exitError{code: 1, err: fmt.Errorf("%d row(s) failed again; they keep their rows with the new error (walpost poison list)", res.Failed)}
			}
			return nil
		},
	}
	// StringArray, not StringSlice: a key may contain a comma.
	cmd.Flags().StringArrayVar(&keys, "key", nil, "idempotency key to replay (repeatable; taken whole, commas included)")
	cmd.Flags().BoolVar(&all, "all", false, "replay every row not yet replayed")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be replayed, produce nothing")
	cmd.Flags().BoolVar(&force, "force", false, "also replay rows already replayed")
	addConfigFlags(cmd, flagsPostgres|flagsKafka|flagsLog)
	return cmd
}
