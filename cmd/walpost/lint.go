package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/lint"
)

func newLintCommand() *cobra.Command {
	var (
		jsonOut     bool
		disable     []string
		outboxTable string
		poisonTable string
	)
	cmd := &cobra.Command{
		Use:   "lint [--json] [--disable RULE]… FILE|DIR…",
		Short: "Check application SQL for outbox anti-patterns (offline, for CI)",
		Long: `lint parses SQL files (directories are searched recursively for *.sql) with
PostgreSQL's own parser, PL/pgSQL function bodies and DO blocks included, and
reports outbox anti-patterns that lose or double events (rules OBX001-OBX008,
see the README).

Exit status: 0 clean, 1 findings, 2 a file could not be read or parsed.

Table names come from postgres.table and postgres.poison_table; rules listed in
lint.disable (config file or WALPOST_LINT_DISABLE) are skipped, as are those
given with --disable (id or name, repeatable).`,
		Example: "  walpost lint db/migrations/ app/sql/\n\n" +
			"  # findings as JSON, one rule skipped\n" +
			"  walpost lint --json --disable OBX003 schema.sql",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SilenceUsage = true
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			opts := lint.Options{
				OutboxTable: cfg.Postgres.Table,
				PoisonTable: cfg.Postgres.PoisonTable,
				Disable:     append(append([]string{}, cfg.Lint.Disable...), disable...),
			}
			if cmd.Flags().Changed("outbox-table") {
				opts.OutboxTable = outboxTable
			}
			if cmd.Flags().Changed("poison-table") {
				opts.PoisonTable = poisonTable
			}
			code, err := lint.Run(cmd.Context(), opts, args, cmd.OutOrStdout(), jsonOut)
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
	fs.BoolVar(&jsonOut, "json", false, `print {"findings":[…],"errors":[…]} instead of text`)
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
