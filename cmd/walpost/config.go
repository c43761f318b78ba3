package main

import (
	"reflect"
	"strings"

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
	_ = cmd.RegisterFlagCompletionFunc("set", completeSet)
	if groups&flagsLog != 0 {
		enum := config.Enumerations()
		_ = cmd.RegisterFlagCompletionFunc("log-level", fixedCompletion(enum["log.level"]...))
		_ = cmd.RegisterFlagCompletionFunc("log-format", fixedCompletion(enum["log.format"]...))
	}
}

// completeSet completes --set: a key and "=", then the values of an
// enumerated or boolean key (compressions, profiles, delivery modes, log
// levels, SASL mechanisms, formats).
func completeSet(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	enum := config.Enumerations()
	if key, _, ok := strings.Cut(toComplete, "="); ok {
		values := enum[key]
		for _, k := range config.Keys() {
			if k.Key == key && k.Type.Kind() == reflect.Bool {
				values = []string{"true", "false"}
			}
		}
		out := make([]cobra.Completion, 0, len(values))
		for _, v := range values {
			out = append(out, key+"="+v)
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, k := range config.Keys() {
		out = append(out, cobra.CompletionWithDesc(k.Key+"=", "default "+k.Default))
	}
	return out, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
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
