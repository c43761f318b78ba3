package main

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestUsageErrorsExit2: a command line cobra or the command refuses exits
// 2 with the message and a pointer to --help; a command that ran and
// failed exits 1.
func TestUsageErrorsExit2(t *testing.T) {
	clearWalpostEnv(t)
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"nosuch"}, 2, `unknown command "nosuch"`},
		{[]string{"--nosuch"}, 2, "unknown flag: --nosuch"},
		{[]string{"version", "extra"}, 2, "extra"},
		{[]string{"lint"}, 2, "requires at least 1 arg"},
		{[]string{"poison", "replay"}, 2, "give either --all or one or more --key"},
		{[]string{"prune"}, 2, "--older-than is required"},
		{[]string{"lint", "--postgres-url", "postgres://x"}, 2, "unknown flag: --postgres-url"},
		{[]string{"poison", "list", "--limit", "many"}, 2, "--limit"},
		{[]string{"config", "--slot", "Bad-Slot"}, 1, "postgres.slot"},
		{[]string{"version"}, 0, ""},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stderr strings.Builder
			root := newRootCommand()
			root.SetOut(io.Discard)
			code := execute(context.Background(), root, tt.args, &stderr)
			if code != tt.code || !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("exit %d, want %d; stderr %q, want it to contain %q", code, tt.code, stderr.String(), tt.want)
			}
			if tt.code == 2 && !strings.Contains(stderr.String(), "Run 'walpost ") {
				t.Errorf("usage error without a pointer to --help: %q", stderr.String())
			}
		})
	}
}

// TestPoisonReplayKeyWithComma: --key takes its value whole.
func TestPoisonReplayKeyWithComma(t *testing.T) {
	cmd := newPoisonReplayCommand()
	if err := cmd.ParseFlags([]string{"--key", "order-1,line-2", "--key", "b"}); err != nil {
		t.Fatal(err)
	}
	got := cmd.Flags().Lookup("key").Value.(pflag.SliceValue).GetSlice()
	if want := []string{"order-1,line-2", "b"}; !slices.Equal(got, want) {
		t.Errorf("--key order-1,line-2 --key b = %q, want %q", got, want)
	}
}
