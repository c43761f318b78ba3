package main

import (
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/lint"
)

func newLintCommand() *cobra.Command {
	var (
		jsonOut     bool
		format      string
		disable     []string
		outboxTable string
		poisonTable string
		keyColumn   string
	)
	cmd := &cobra.Command{
		Use:   "lint [--format text|json|sarif] [--disable RULE]… FILE|DIR…",
		Short: "Check application SQL for outbox anti-patterns (offline, for CI)",
		Long: `lint parses SQL files (directories are searched recursively for *.sql) with
PostgreSQL's own parser, PL/pgSQL function bodies and DO blocks included, and
reports outbox and inbox anti-patterns that lose or double events (rules OBX001-OBX010,
see the README).

Exit status: 0 clean, 1 findings, 2 a file could not be read or parsed.

Table names come from postgres.table and postgres.poison_table, the idempotency
key column from the mapping: mapping.key_column with mapping.profile walpost
(idempotency_key), mapping.id_column with debezium (id). Rules listed in
lint.disable (config file or WALPOST_LINT_DISABLE) are skipped, as are those
given with --disable (id or name, repeatable).

A finding is silenced by a comment on its line or the line before:
  -- walpost-lint: ignore OBX003 single-row lookup by primary key
naming the rule (id or name, several with commas) and the reason; a
suppression without a reason, or of no rule, is an error (exit 2).

--format sarif prints a SARIF 2.1.0 log for code-scanning UIs (GitHub code
scanning, GitLab, Azure DevOps); --json is --format json.`,
		Example: "  walpost lint db/migrations/ app/sql/\n\n" +
			"  # findings as JSON, one rule skipped\n" +
			"  walpost lint --json --disable OBX003 schema.sql\n\n" +
			"  # Debezium's outbox table, for a code-scanning upload\n" +
			"  WALPOST_MAPPING_PROFILE=debezium WALPOST_POSTGRES_TABLE=outboxevent walpost lint --format sarif db/ > walpost-lint.sarif",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SilenceUsage = true
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			switch {
			case jsonOut && cmd.Flags().Changed("format") && format != lint.FormatJSON:
				return usageError(fmt.Errorf("--json and --format %s: give one of them", format))
			case jsonOut:
				format = lint.FormatJSON
			case !slices.Contains(lint.Formats, format):
				return usageError(fmt.Errorf("--format %q: text, json or sarif", format))
			}
			opts := lint.Options{
				OutboxTable: cfg.Postgres.Table,
				PoisonTable: cfg.Postgres.PoisonTable,
				KeyColumn:   idempotencyKeyColumn(cfg.Mapping),
				Disable:     append(append([]string{}, cfg.Lint.Disable...), disable...),
			}
			if cmd.Flags().Changed("key-column") {
				opts.KeyColumn = keyColumn
			}
			if cmd.Flags().Changed("outbox-table") {
				opts.OutboxTable = outboxTable
			}
			if cmd.Flags().Changed("poison-table") {
				opts.PoisonTable = poisonTable
			}
			code, err := lint.RunFormat(cmd.Context(), opts, args, cmd.OutOrStdout(), format, build().Version)
			if err != nil { // invalid --disable, or stdout failed
				return &exitError{code: lint.ExitErrors, err: fmt.Errorf("lint: %w", err)}
			}
			if code != lint.ExitClean {
				// The findings are on stdout already: exit with the code, no message.
				return &exitError{code: code}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	addConfigFlags(cmd, config.FlagsNone)
	fs.BoolVar(&jsonOut, "json", false, `print {"findings":[…],"errors":[…]} instead of text (--format json)`)
	fs.StringVar(&format, "format", lint.FormatText, "output: text, json or sarif (SARIF 2.1.0, for code-scanning UIs)")
	fs.StringVar(&keyColumn, "key-column", lint.DefaultKeyColumn, "the outbox's idempotency key column (overrides the mapping: mapping.key_column, or mapping.id_column with the debezium profile)")
	_ = cmd.RegisterFlagCompletionFunc("format", fixedCompletion(lint.Formats...))
	fs.StringArrayVar(&disable, "disable", nil, "skip a rule, by id (OBX003) or name (outbox-poll-order); repeatable, added to lint.disable")
	fs.StringVar(&outboxTable, "outbox-table", lint.DefaultOutboxTable, "outbox table, optionally schema-qualified (overrides postgres.table)")
	fs.StringVar(&poisonTable, "poison-table", lint.DefaultPoisonTable, "poison table (overrides postgres.poison_table)")
	_ = cmd.RegisterFlagCompletionFunc("disable", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		var out []cobra.Completion
		for _, r := range lint.Rules() {
			out = append(out, cobra.CompletionWithDesc(r.ID, r.Name), cobra.CompletionWithDesc(r.Name, r.ID))
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	})
	cmd.ValidArgsFunction = func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return []cobra.Completion{"sql"}, cobra.ShellCompDirectiveFilterFileExt
	}
	return cmd
}

// idempotencyKeyColumn is the outbox column consumers deduplicate on: the
// record key column in walpost's layout, the event id in Debezium's.
func idempotencyKeyColumn(m config.Mapping) string {
	if m.Profile == config.ProfileDebezium {
		return m.IDColumn
	}
	return m.KeyColumn
}
