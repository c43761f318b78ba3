package writer_test

import (
	"context"
	"io"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// TestExamples runs the examples that need PostgreSQL (go test only
// compiles examples without an Output comment), each in a fresh schema,
// and checks what they print.
func TestExamples(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func()
		want string
	}{
		{"Example", Example, "debited: balance 70, 1 event\ninsufficient funds: balance 70, 1 event\n"},
		{"Example_retry", Example_retry, "attempt 1: connection reset while reading the commit's reply; retrying with the same key\n" +
			"attempt 2: already written, nothing to do\nbalance 70, 1 event\n"},
		{"Example_batch", Example_batch, "3 events\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDB(t)
			d.exec(t, `INSERT INTO `+d.Schema+`.accounts VALUES ('a1', 100)`)
			cfg, err := pgxpool.ParseConfig(os.Getenv("WALPOST_POSTGRES_URL"))
			if err != nil {
				t.Fatal(err)
			}
			cfg.ConnConfig.RuntimeParams["search_path"] = d.Schema
			if appPool, err = pgxpool.NewWithConfig(context.Background(), cfg); err != nil {
				t.Fatal(err)
			}
			defer appPool.Close()
			appDB = stdlib.OpenDB(*cfg.ConnConfig)
			defer appDB.Close()
			if got := stdout(t, tc.run); got != tc.want {
				t.Fatalf("%s printed\n%s\nwant\n%s", tc.name, got, tc.want)
			}
		})
	}
}

// stdout returns what fn prints.
func stdout(t *testing.T, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); done <- b }()
	defer func() { os.Stdout = saved }()
	fn()
	os.Stdout = saved
	w.Close()
	return string(<-done)
}
