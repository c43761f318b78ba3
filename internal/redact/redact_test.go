package redact

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	tests := []struct {
		name, in string
		keep     []string // must survive
	}{
		{"url", "postgres://walpost:hunter2@db.example:5432/app?sslmode=require", []string{"walpost", "db.example:5432/app", "sslmode=require"}},
		{"postgresql scheme", "postgresql://walpost:hunter2@db/app", []string{"walpost", "@db/app"}},
		{"url with escaped password", "postgres://walpost:hun%40ter2@db/app", []string{"@db/app"}},
		{"url password in query", "postgres://walpost@db/app?password=hunter2", []string{"@db/app"}},
		{"url in message", `connect to postgres://walpost:hunter2@db:5432/app failed: dial tcp: connection refused`, []string{"connect to", "connection refused"}},
		{"url in quotes", `cannot parse "postgres://walpost:hunter2@db/app"`, []string{"cannot parse"}},
		{"url with malformed port", "postgres://walpost:hunter2@db:notaport/app", []string{"postgres://"}},
		{"url with bad escape", "postgres://walpost:hunter2%zz@db/app", []string{"postgres://"}},
		{"dsn", "host=db port=5432 user=walpost password=hunter2 dbname=app", []string{"host=db", "user=walpost", "dbname=app"}},
		{"dsn quoted password", "host=db password='hunter2 with space' dbname=app", []string{"host=db", "dbname=app"}},
		{"dsn spaced equals", "host=db password = hunter2 dbname=app", []string{"dbname=app"}},
		{"dsn upper case", "HOST=db PASSWORD=hunter2", []string{"HOST=db"}},
		{"dsn in message", "invalid config: postgres.url = \"host=db password=hunter2\": bad", []string{"invalid config: postgres.url"}},
		{"two urls", "from postgres://a:hunter2@x/db to postgres://b:hunter2@y/db", []string{"@x/db", "@y/db"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := String(tt.in)
			if strings.Contains(got, "hunter2") {
				t.Errorf("String(%q) = %q: password still visible", tt.in, got)
			}
			for _, k := range tt.keep {
				if !strings.Contains(got, k) {
					t.Errorf("String(%q) = %q: lost %q", tt.in, got, k)
				}
			}
		})
	}
	for _, clean := range []string{"", "no secrets here", "postgres://walpost@db/app", "host=db user=walpost"} {
		if got := String(clean); got != clean {
			t.Errorf("String(%q) = %q, want it unchanged", clean, got)
		}
	}
}

// TestErrorKeepsChain: a redacted error hides the password and still
// unwraps to its cause.
func TestErrorKeepsChain(t *testing.T) {
	cause := errors.New("boom")
	err := Error(fmt.Errorf("connect postgres://u:s3cret@h/db: %w", cause))
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("Error() = %q: password visible", err)
	}
	if !errors.Is(err, cause) {
		t.Fatalf("errors.Is(redacted, cause) = false")
	}
	if Error(nil) != nil {
		t.Fatalf("Error(nil) != nil")
	}
	if Error(err) != err {
		t.Fatalf("Error(Error(x)) wraps twice")
	}
}
