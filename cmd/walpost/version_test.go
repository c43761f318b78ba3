package main

import (
	"context"
	"strings"
	"testing"
)

// TestVersionCommandAndFlag: `walpost version` and `walpost --version`
// print the version, commit and build date given at link time, and the
// Go version.
func TestVersionCommandAndFlag(t *testing.T) {
	clearWalpostEnv(t)
	oldV, oldC, oldD := version, commit, date
	t.Cleanup(func() { version, commit, date = oldV, oldC, oldD })
	version, commit, date = "v9.8.7", "0123456789abcdef0123456789abcdef01234567", "2026-12-01T10:00:00Z"
	const want = "walpost v9.8.7 (commit 0123456789abcdef0123456789abcdef01234567, built 2026-12-01T10:00:00Z, go1."
	for _, args := range [][]string{{"version"}, {"--version"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var stdout, stderr strings.Builder
			root := newRootCommand()
			root.SetOut(&stdout)
			if code := execute(context.Background(), root, args, &stderr); code != 0 {
				t.Fatalf("exit %d, stderr %q", code, stderr.String())
			}
			if got := stdout.String(); !strings.HasPrefix(got, want) || !strings.HasSuffix(got, ")\n") || strings.Count(got, "\n") != 1 {
				t.Errorf("output %q, want one line starting %q", got, want)
			}
		})
	}
	// No -v shorthand: -v stays free for a later flag.
	var stderr strings.Builder
	root := newRootCommand()
	if code := execute(context.Background(), root, []string{"-v"}, &stderr); code != exitUsage {
		t.Errorf("walpost -v exit %d, want %d (unknown shorthand)", code, exitUsage)
	}
}
