package main

import (
	"github.com/spf13/cobra"

	"github.com/walpost/walpost/config"
)

func newConfigCommand() *cobra.Command {
	var reference bool
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Print the effective configuration (secrets redacted) or the key reference",
		Long: "config prints the configuration walpost would run with, from the file, the environment and the\n" +
			"flags, as YAML that --config reads back. Secrets (passwords in URLs, kafka.sasl.password, tokens)\n" +
			"are redacted to xxxxx, as the header comment says: set them again before using the file. A\n" +
			"*_file key is printed with its file name and its value left empty. An invalid configuration is\n" +
			"refused with every problem at once, exit 1.\n\n" +
			"--reference prints the Markdown table of every key: its WALPOST_* variable, default and meaning.",
		Example: "  # freeze what the environment says into a file\n" +
			"  walpost config > walpost.yaml\n\n" +
			"  # every key, its variable and default\n" +
			"  walpost config --reference",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if reference {
				config.WriteReference(cmd.OutOrStdout())
				return nil
			}
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			return config.WriteEffective(cmd.OutOrStdout(), cfg)
		},
	}
	addConfigFlags(cmd, flagsAll)
	cmd.Flags().BoolVar(&reference, "reference", false, "print the Markdown table of every key, its variable, default and meaning")
	return cmd
}
