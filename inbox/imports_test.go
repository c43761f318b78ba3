package inbox

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports holds the package to what its documentation promises: it
// imports pgx, franz-go and the standard library only, and nothing of
// walpost.
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 20 {
		t.Fatalf("go list -deps gave %d packages", len(deps))
	}
	for _, d := range deps {
		if !strings.Contains(strings.SplitN(d, "/", 2)[0], ".") || d == "github.com/walpost/walpost/inbox" {
			continue
		}
		ok := false
		for _, allowed := range []string{"github.com/jackc/", "github.com/twmb/franz-go/", "github.com/klauspost/compress", "github.com/pierrec/lz4", "golang.org/x/text", "golang.org/x/sync"} {
			ok = ok || strings.HasPrefix(d, allowed)
		}
		if !ok {
			t.Errorf("inbox pulls in %s; allowed: pgx, franz-go (and their dependencies), the standard library", d)
		}
	}
}
