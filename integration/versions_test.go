package integration

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestStackPostgresVersion: the stack's main cluster runs the PostgreSQL
// major PG_VERSION names (Debian's 15 when unset), its data directory and
// binaries (.stack/env) are that major's, and scripts/stack.sh status names
// the version. Run with the PG_VERSION the stack was started with.
func TestStackPostgresVersion(t *testing.T) {
	needStack(t)
	want := 15
	if v := os.Getenv("PG_VERSION"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("PG_VERSION=%q is not a major version", v)
		}
		want = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var version string
	var num int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('server_version_num')::int`).Scan(&version, &num); err != nil {
		t.Fatal(err)
	}
	if num/10000 != want {
		t.Errorf("server_version_num = %d (PostgreSQL %s), want major %d", num, version, want)
	}
	data, bin := os.Getenv("WALPOST_STACK_PGDATA"), os.Getenv("WALPOST_STACK_PG_BIN")
	if data == "" || bin == "" {
		t.Fatal("WALPOST_STACK_PGDATA / WALPOST_STACK_PG_BIN unset: source .stack/env")
	}
	// The data directory belongs to the postgres OS user: ask the server.
	var dir string
	if err := conn.QueryRow(ctx, `SHOW data_directory`).Scan(&dir); err != nil {
		t.Fatal(err)
	}
	if filepath.Clean(dir) != filepath.Clean(data) {
		t.Errorf("server's data_directory %q, .stack/env's WALPOST_STACK_PGDATA %q", dir, data)
	}
	out, err := exec.Command(filepath.Join(bin, "postgres"), "-V").Output()
	if err != nil {
		t.Fatalf("%s/postgres -V: %v", bin, err)
	}
	if f := strings.Fields(string(out)); len(f) < 3 || !strings.HasPrefix(f[2], strconv.Itoa(want)+".") {
		t.Errorf("WALPOST_STACK_PG_BIN %s holds %q, want PostgreSQL %d", bin, strings.TrimSpace(string(out)), want)
	}
	cmd := exec.Command(filepath.Join(repoRoot, "scripts", "stack.sh"), "status")
	status, err := cmd.Output()
	if err != nil {
		t.Fatalf("stack.sh status: %v\n%s", err, status)
	}
	u, err := url.Parse(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	wantLine := "postgres: up (" + u.Host + ", " + data + ", PostgreSQL " + strings.Fields(version)[0] + ")"
	if !strings.Contains(string(status), wantLine) {
		t.Errorf("stack.sh status does not say %q:\n%s", wantLine, status)
	}
}
