package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/poison"
	"github.com/walpost/walpost/sink/kafka"
)

func newPoisonCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "poison",
		Short: "Inspect and replay events quarantined in the poison table",
	}
	cmd.AddCommand(newPoisonListCommand(), newPoisonReplayCommand())
	return cmd
}

func openPoisonStore(cmd *cobra.Command, cfg *config.Config) (*poison.Store, func(), error) {
	pool, err := pgxpool.New(cmd.Context(), cfg.Postgres.URL)
	if err != nil {
		return nil, nil, redact.Error(fmt.Errorf("postgres.url: %w", err))
	}
	return poison.NewStore(pool, cfg.Postgres.PoisonTable), pool.Close, nil
}

func newPoisonListCommand() *cobra.Command {
	var asJSON bool
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List quarantined events in created_at order",
		Args:  cobra.NoArgs,
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
			return writePoisonList(cmd.OutOrStdout(), rows, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most N rows (0: all)")
	return cmd
}

// poisonListRow is the JSON shape of `walpost poison list --json`.
type poisonListRow struct {
	Key          string     `json:"idempotency_key"`
	Topic        string     `json:"topic"`
	EventType    *string    `json:"event_type"`
	PartitionKey *string    `json:"partition_key"`
	Attempts     int        `json:"attempts"`
	ErrorClass   string     `json:"error_class"`
	Error        string     `json:"error"`
	CommitLSN    string     `json:"commit_lsn"`
	CreatedAt    string     `json:"created_at"` // as the created_at header: may be infinity or an expanded year
	PoisonedAt   time.Time  `json:"poisoned_at"`
	ReplayedAt   *time.Time `json:"replayed_at"`
	ReplayCount  int        `json:"replay_count"`
	// OutboxID with CommitLSN is the row's identity: one key may have
	// several rows, one per quarantined event.
	OutboxID string `json:"outbox_id"`
}

func writePoisonList(w io.Writer, rows []poison.Row, asJSON bool) error {
	if asJSON {
		out := make([]poisonListRow, len(rows))
		for i, r := range rows {
			out[i] = poisonListRow{Key: r.IdempotencyKey, Topic: r.Topic, EventType: r.EventType, PartitionKey: r.PartitionKey,
				Attempts: r.Attempts, ErrorClass: r.ErrorClass, Error: r.LastError, CommitLSN: r.CommitLSN,
				CreatedAt: r.CreatedAtHeader(), PoisonedAt: r.PoisonedAt.UTC(), ReplayedAt: utcPtr(r.ReplayedAt), ReplayCount: r.ReplayCount,
				OutboxID: r.OutboxID}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no quarantined events")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tTOPIC\tATTEMPTS\tCLASS\tPOISONED_AT\tREPLAYED_AT\tERROR")
	for _, r := range rows {
		replayed := "-"
		if r.ReplayedAt != nil {
			replayed = fmt.Sprintf("%s (x%d)", r.ReplayedAt.UTC().Format(time.RFC3339), r.ReplayCount)
		}
		msg := strings.ReplaceAll(r.LastError, "\n", " ")
		if r := []rune(msg); len(r) > 80 {
			msg = string(r[:77]) + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.IdempotencyKey, r.Topic, r.Attempts, r.ErrorClass,
			r.PoisonedAt.UTC().Format(time.RFC3339), replayed, msg)
	}
	return tw.Flush()
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
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
			kcfg, err := kafka.ConfigFrom(cfg)
			if err != nil {
				return err
			}
			// One record at a time: no linger, and a client id of its own.
			kcfg.ClientID += "-replay"
			kcfg.Linger, kcfg.MaxBufferedRecords = 0, 0
			kcfg.Logger = logger.With("component", "kafka")
			k, err := kafka.New(kcfg)
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
	return cmd
}
