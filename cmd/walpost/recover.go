package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/kafkaconf"
	"github.com/walpost/walpost/recovery"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink/kafka"
)

func newRecoverCommand() *cobra.Command {
	var since string
	var dryRun, otherSystem, duplicates bool
	cmd := &cobra.Command{
		Use:   "recover",
		Short: "Re-create a lost slot and produce the outbox rows committed in its gap",
		Long: "recover closes the gap of a dropped or invalidated slot (walpost run refuses to start over it):\n" +
			"it creates the slot with an exported snapshot, reads in that snapshot the outbox rows committed\n" +
			"after walpost's recorded position (by commit timestamp when track_commit_timestamp is on, else by\n" +
			"created_at minus recover.margin), produces them in that order through the idempotent producer\n" +
			"with the header walpost_recovered: true, records the new slot's position and prints a report.\n" +
			"Then walpost run streams from the new slot. Rows deleted before the snapshot cannot be recovered.\n\n" +
			"In delivery.mode exactly-once it runs only with --allow-duplicates: the rows it re-sends may already be in\n" +
			"committed Kafka transactions, so read_committed consumers may see them twice (each carries its\n" +
			"idempotency_key). It then produces the gap inside Kafka transactions of the slot's transactional id and\n" +
			"commits with the last one the slot's checkpoint at the new slot's position.",
		Example: "  # the plan and the rows, nothing created or sent\n" +
			"  walpost recover --dry-run\n\n" +
			"  walpost recover\n\n" +
			"  # re-send what was committed in the last two hours\n" +
			"  walpost recover --since 2h",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var opts recovery.Options
			if since != "" {
				t, err := parseSince(since, time.Now())
				if err != nil {
					return usageError(err)
				}
				opts.Since = t
			}
			opts.DryRun, opts.AllowOtherSystem, opts.AllowDuplicates = dryRun, otherSystem, duplicates
			cfg, err := loadConfigFor(cmd, config.NeedAll)
			if err != nil {
				return err
			}
			logger := newLogger(cmd.ErrOrStderr(), cfg.Log)
			r := &recovery.Recoverer{Config: cfg, Logger: logger}
			// In exactly-once mode recover opens the slot's transactional
			// producer itself.
			if !dryRun && cfg.Delivery.Mode != config.ExactlyOnce {
				k, err := commandSink(cmd.Context(), cfg, logger, "-recover", nil)
				if err != nil {
					return err
				}
				defer k.Close()
				r.Sink = k
			}
			rep, err := r.Run(cmd.Context(), opts)
			if err == nil || rep.Found > 0 {
				_ = rep.Write(cmd.OutOrStdout())
			}
			return err
		},
	}
	cmd.Flags().StringVar(&since, "since", "", "re-send rows committed at or after this time instead of the recorded position's (RFC 3339, e.g. 2026-12-01T10:00:00Z, or a duration such as 2h for that long ago); no margin is applied")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the plan and the rows it would produce now; create and produce nothing")
	cmd.Flags().BoolVar(&duplicates, "allow-duplicates", false, "delivery.mode exactly-once: run anyway, although read_committed consumers may see the re-sent rows twice (every record carries its idempotency_key); the gap is produced inside Kafka transactions and the slot's checkpoint is reset to the new position")
	addConfigFlags(cmd, flagsPostgres|flagsKafka|flagsLog)
	cmd.Flags().BoolVar(&otherSystem, "allow-other-system", false, "replace a position recorded on another PostgreSQL system identifier (the database was restored or upgraded here)")
	return cmd
}

// parseSince reads --since: an RFC 3339 time, or a duration before now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	if strings.HasSuffix(s, "d") {
		return time.Time{}, fmt.Errorf("--since %q: days are not a Go duration; write hours, e.g. 48h", s)
	}
	return time.Time{}, fmt.Errorf("--since %q: want an RFC 3339 time (2026-12-01T10:00:00Z) or a positive duration before now (2h, 90m)", s)
}

// commandSink is the idempotent Kafka producer of a command that produces
// beside walpost run (recover, resend, poison replay): the configuration's,
// with a client id of its own (suffix) and tune applied, logging as the
// kafka component, with the outbox table's column types (a bytea payload
// is produced as its bytes), as walpost run reads them at each session
// start.
func commandSink(ctx context.Context, cfg *config.Config, logger *slog.Logger, suffix string, tune func(*kafka.Config)) (*kafka.Sink, error) {
	kcfg, err := kafkaconf.ConfigFrom(cfg)
	if err != nil {
		return nil, err
	}
	kcfg.ClientID += suffix
	kcfg.Logger = logger.With("component", "kafka")
	if tune != nil {
		tune(&kcfg)
	}
	k, err := kafka.New(kcfg)
	if err != nil {
		return nil, err
	}
	if err := setTableTypes(ctx, cfg, k); err != nil {
		k.Close()
		return nil, err
	}
	return k, nil
}

// setTableTypes gives s the outbox table's key and payload column types
// (kafkaconf.TableTypes); a column walpost cannot encode is an error
// naming it.
func setTableTypes(ctx context.Context, cfg *config.Config, s *kafka.Sink) error {
	conn, err := replication.ConnectSQL(ctx, cfg.Postgres.URL)
	if err != nil {
		return fmt.Errorf("read the outbox table's column types: %w", err)
	}
	defer conn.Close(context.Background())
	table, err := replication.ResolveTable(ctx, conn, cfg.Postgres.Table)
	if err != nil {
		return err
	}
	kt, vt, err := kafkaconf.TableTypes(ctx, conn, table, cfg.Mapping)
	if err != nil {
		return err
	}
	s.SetColumnTypes(kt, vt)
	return nil
}
