package main

import (
	"github.com/spf13/cobra"

	"github.com/walpost/walpost/config"
)

func newConfigCommand() *cobra.Command {
	var reference bool
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Print the effective configuration as YAML that --config reads (secrets redacted), or the reference table",
		Args:  cobra.NoArgs,
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
