package main

import (
	"github.com/spf13/cobra"

	"github.com/walpost/walpost/config"
)

// The flag groups of addConfigFlags (config.FlagGroup).
const (
	flagsPostgres = config.FlagsPostgres
	flagsKafka    = config.FlagsKafka
	flagsHTTP     = config.FlagsHTTP
	flagsLog      = config.FlagsLog
	flagsAll      = config.FlagsAll
)

// addConfigFlags gives cmd --config and the shortcut flags of groups
// (only the settings the command uses), with completion of their
// enumerated values.
func addConfigFlags(cmd *cobra.Command, groups config.FlagGroup) {
	config.AddFlagsFor(cmd.Flags(), groups)
	_ = cmd.MarkFlagFilename("config", "yaml", "yml", "toml", "json")
	if groups&flagsLog != 0 {
		enum := config.Enumerations()
		_ = cmd.RegisterFlagCompletionFunc("log-level", fixedCompletion(enum["log.level"]...))
		_ = cmd.RegisterFlagCompletionFunc("log-format", fixedCompletion(enum["log.format"]...))
	}
}

// fixedCompletion completes a flag's value from values.
func fixedCompletion(values ...string) cobra.CompletionFunc {
	return func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return values, cobra.ShellCompDirectiveNoFileComp
	}
}

// loadConfig reads, decodes and validates the configuration of cmd; it
// requires no connection setting (commands that work offline).
func loadConfig(cmd *cobra.Command) (*config.Config, error) {
	return loadConfigFor(cmd, config.NeedNothing)
}

// loadConfigFor reads, decodes and validates the configuration of cmd,
// requiring the connection settings in need.
func loadConfigFor(cmd *cobra.Command, need config.Needs) (*config.Config, error) {
	return config.Load(cmd.Flags(), need)
}
