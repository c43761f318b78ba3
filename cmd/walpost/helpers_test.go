package main

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/walpost/walpost/config"
)

// clearWalpostEnv unsets every WALPOST_* variable for the test (restored
// afterwards), so a sourced .stack/env does not leak into the unit tests.
func clearWalpostEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "WALPOST_") {
			t.Setenv(k, "") // registers the restore
			os.Unsetenv(k)
		}
	}
}

// testCommand is a cobra command with the flags every walpost command has,
// parsed from args.
func testCommand(t *testing.T, args ...string) *cobra.Command {
	t.Helper()
	cmd := &cobra.Command{Use: "test"}
	config.AddFlags(cmd.Flags())
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatalf("parse flags %v: %v", args, err)
	}
	return cmd
}

func eq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}
