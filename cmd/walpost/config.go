package main

import (
	"github.com/spf13/cobra"

	"github.com/walpost/walpost/config"
)

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
