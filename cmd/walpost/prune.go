package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/prune"
)

func newPruneCommand() *cobra.Command {
	var opts prune.Options
	cmd := &cobra.Command{
		Use:   "prune --older-than D",
		Short: "Delete outbox rows older than D that walpost confirmed, in short batches",
		Long: "prune deletes outbox rows created more than D ago whose transactions walpost confirmed: never past\n" +
			"the position recorded in walpost_position (its last commit time, minus recover.margin when rows are\n" +
			"chosen by created_at), so walpost recover still finds every row of a lost slot's gap. Each batch of\n" +
			"at most --batch rows is one short transaction that skips locked rows; inserts are never blocked.\n" +
			"It never touches the poison table. Without a recorded position it deletes nothing.",
		Example: "  # how many rows of more than 7 days would go\n" +
			"  walpost prune --older-than 168h --dry-run\n\n" +
			"  walpost prune --older-than 168h --batch 5000",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("older-than") {
				return usageError(errors.New("--older-than is required: the age of the rows to delete, e.g. --older-than 168h for 7 days"))
			}
			cfg, err := loadConfigFor(cmd, config.NeedPostgres)
			if err != nil {
				return err
			}
			p := &prune.Pruner{Config: cfg, Logger: newLogger(cmd.ErrOrStderr(), cfg.Log)}
			rep, err := p.Run(cmd.Context(), opts)
			if rep != nil && rep.Table != "" && (err == nil || rep.Deleted > 0) {
				_ = rep.Write(cmd.OutOrStdout())
			}
			return err
		},
	}
	cmd.Flags().DurationVar(&opts.OlderThan, "older-than", 0, "delete rows created more than this long ago (a duration, e.g. 168h for 7 days)")
	cmd.Flags().IntVar(&opts.Batch, "batch", 1000, "rows per delete transaction (1 to 100000)")
	cmd.Flags().BoolVar(&opts.DryRun, "dry-run", false, "count the rows that would be deleted; delete nothing")
	addConfigFlags(cmd, flagsPostgres|flagsLog)
	return cmd
}
