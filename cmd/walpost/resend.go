package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/resend"
)

func newResendCommand() *cobra.Command {
	var since, until, where string
	var opts resend.Options
	cmd := &cobra.Command{
		Use:   "resend [--since T] [--until T] [--key K...] [--where SQL] [--topic X]",
		Short: "Re-produce outbox rows still in the table, chosen by time, key or predicate",
		Long: "resend re-produces outbox rows that are still in the table, beside a running walpost run and\n" +
			"without touching the slot or walpost_position: the rows committed before its snapshot that match\n" +
			"--since/--until (commit time when track_commit_timestamp is on, else created_at), --key and --where,\n" +
			"in commit order (by commit timestamp; without them by created_at), through the idempotent producer,\n" +
			"each record with the header walpost_resent: true and commit_lsn 0/0; in delivery.mode exactly-once\n" +
			"inside Kafka transactions of a transactional id of its own. --topic sends them to another topic (a\n" +
			"consumer's private re-drive). It prints a progress line every 5 s and a report.\n\n" +
			"--where is one boolean expression over the outbox's columns, checked before anything runs: columns,\n" +
			"constants, comparisons, AND/OR/NOT, IN, BETWEEN, LIKE, IS NULL, CASE, casts, jsonb operators and a\n" +
			"few immutable functions (docs/resend.md lists them); subqueries, other functions, semicolons and\n" +
			"comments are refused. It runs in a READ ONLY transaction, and --dry-run shows what it matches.\n\n" +
			"The progress (the last row of the acknowledged prefix) is recorded in --progress-file every second;\n" +
			"--resume continues an interrupted resend after it, with its recorded selection.",
		Example: "  # how many rows, and their time range; nothing is sent\n" +
			"  walpost resend --since 10m --where \"event_type = 'order.created'\" --dry-run\n\n" +
			"  walpost resend --since 10m --where \"event_type = 'order.created'\" --max-rate 2000\n\n" +
			"  # two keys, to a consumer's own topic\n" +
			"  walpost resend --key order-42 --key order-43 --topic billing.redrive\n\n" +
			"  # after an interruption (Ctrl-C, a failure)\n" +
			"  walpost resend --resume",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			now := time.Now()
			var err error
			if since != "" {
				if opts.Since, err = parseTimeFlag("--since", since, now); err != nil {
					return usageError(err)
				}
			}
			if until != "" {
				if opts.Until, err = parseTimeFlag("--until", until, now); err != nil {
					return usageError(err)
				}
			}
			// Checked before anything connects or reads the configuration.
			if cmd.Flags().Changed("where") {
				if opts.Where, err = resend.ParseWhere(where); err != nil {
					return usageError(err)
				}
			}
			if err := opts.Check(); err != nil {
				return usageError(err)
			}
			cfg, err := loadConfigFor(cmd, config.NeedAll)
			if err != nil {
				return err
			}
			logger := newLogger(cmd.ErrOrStderr(), cfg.Log)
			errOut := cmd.ErrOrStderr()
			r := &resend.Resender{Config: cfg, Logger: logger, OnProgress: func(p resend.Progress) { fmt.Fprintln(errOut, p) }}
			// In exactly-once mode resend opens its transactional producer
			// itself.
			if !opts.DryRun && cfg.Delivery.Mode != config.ExactlyOnce {
				k, err := commandSink(cmd.Context(), cfg, logger, "-resend", nil)
				if err != nil {
					return err
				}
				defer k.Close()
				r.Sink = k
			}
			rep, err := r.Run(cmd.Context(), opts)
			if rep != nil && rep.Table != "" && (err == nil || rep.Produced > 0 || rep.Matched > 0) {
				_ = rep.Write(cmd.OutOrStdout())
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&since, "since", "", "rows whose commit time (created_at without track_commit_timestamp) is at or after this time (RFC 3339, e.g. 2026-12-01T10:00:00Z, or a duration such as 10m for that long ago)")
	f.StringVar(&until, "until", "", "rows whose commit time (created_at without track_commit_timestamp) is before this time (RFC 3339 or a duration before now); default: every row committed before the snapshot")
	// StringArray, not StringSlice: a key may contain a comma.
	f.StringArrayVar(&opts.Keys, "key", nil, "only rows with this idempotency key (repeatable; taken whole, commas included)")
	f.StringVar(&where, "where", "", "only rows matching this boolean expression over the outbox's columns, e.g. \"event_type = 'order.created'\" (no subqueries, semicolons, comments or functions beyond docs/resend.md's list)")
	f.StringVar(&opts.Topic, "topic", "", "send every record to this topic instead of the row's topic or kafka.topic (it must exist)")
	f.BoolVar(&opts.DryRun, "dry-run", false, "count the matching rows and print their time range and bytes; produce and record nothing")
	f.Float64Var(&opts.MaxRate, "max-rate", 0, "produce at most this many rows per second, so the live stream keeps its share of the brokers (0: no limit)")
	f.BoolVar(&opts.Resume, "resume", false, "continue the unfinished resend recorded in --progress-file, after its last acknowledged row, with its selection")
	f.StringVar(&opts.ProgressFile, "progress-file", "walpost-resend.json", "file in which the selection and the last acknowledged row are recorded (every second and at the end), for --resume")
	_ = cmd.MarkFlagFilename("progress-file", "json")
	addConfigFlags(cmd, flagsPostgres|flagsKafka|flagsLog)
	return cmd
}

// parseTimeFlag reads a time flag (--since, --until): an RFC 3339 time,
// or a positive duration before now.
func parseTimeFlag(flag, s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	if strings.HasSuffix(s, "d") {
		return time.Time{}, fmt.Errorf("%s %q: days are not a Go duration; write hours, e.g. 48h", flag, s)
	}
	return time.Time{}, fmt.Errorf("%s %q: want an RFC 3339 time (2026-12-01T10:00:00Z) or a positive duration before now (2h, 90m)", flag, s)
}
