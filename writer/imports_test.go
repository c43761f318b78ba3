package writer

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports holds the package to what its documentation promises: it
// imports pgx and the standard library only, and
// nothing else of walpost, its Kafka client or its configuration comes
// with it.
func TestImports(t *testing.T) {
	list := func(args ...string) []string {
		out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
		if err != nil {
			t.Fatalf("go list %v: %v", args, err)
		}
		return strings.Fields(string(out))
	}
	for _, imp := range list("-f", `{{join .Imports " "}}`, ".") {
		std := !strings.Contains(strings.SplitN(imp, "/", 2)[0], ".")
		if !std && imp != "github.com/jackc/pgx/v5" && !strings.HasPrefix(imp, "github.com/jackc/pgx/v5/") {
			t.Errorf("writer imports %s; allowed: the standard library and pgx", imp)
		}
	}
	deps := list("-deps", ".")
	if len(deps) < 20 {
		t.Fatalf("go list -deps gave %d packages", len(deps))
	}
	for _, d := range deps {
		for _, banned := range []string{"github.com/walpost/walpost/", "github.com/twmb/franz-go", "github.com/spf13/", "github.com/prometheus/"} {
			if strings.HasPrefix(d, banned) && d != "github.com/walpost/walpost/writer" {
				t.Errorf("writer pulls in %s", d)
			}
		}
	}
}
