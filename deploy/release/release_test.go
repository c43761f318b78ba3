//go:build release

// The test of `make release-snapshot`: minutes of cross-compiling, so it
// runs only with -tags release:
//
//	cd deploy && go test -tags release -count=1 -timeout 30m ./release

package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestReleaseSnapshot runs `make release-snapshot` at the repository root
// and checks that dist/ holds an archive per target, a checksum line for
// each, and a linux/amd64 binary whose --version names its commit.
func TestReleaseSnapshot(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "release-snapshot")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make release-snapshot: %v\n%s", err, out)
	}
	sums, err := os.ReadFile(filepath.Join(root, "dist", "checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"linux_amd64", "linux_arm64", "darwin_amd64", "darwin_arm64"} {
		m, _ := filepath.Glob(filepath.Join(root, "dist", "walpost_*_"+target+".tar.gz"))
		if len(m) != 1 {
			t.Errorf("%s: %d archives, want 1", target, len(m))
			continue
		}
		if !strings.Contains(string(sums), filepath.Base(m[0])) {
			t.Errorf("checksums.txt has no line for %s", filepath.Base(m[0]))
		}
	}
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("the linux/amd64 binary runs only on linux/amd64")
	}
	bins, _ := filepath.Glob(filepath.Join(root, "dist", "walpost_linux_amd64*", "walpost"))
	if len(bins) != 1 {
		t.Fatalf("linux/amd64 binaries: %v, want one", bins)
	}
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	v, err := exec.Command(bins[0], "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", bins[0], err, v)
	}
	if !strings.HasPrefix(string(v), "walpost ") || !strings.Contains(string(v), strings.TrimSpace(string(head))) {
		t.Errorf("--version = %q, want walpost and commit %s", v, head)
	}
	// Static: the binary needs no dynamic loader.
	if f, err := exec.Command("file", bins[0]).Output(); err == nil && !strings.Contains(string(f), "statically linked") {
		t.Errorf("not a static binary: %s", f)
	}
}
