package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in      string
		want    time.Time
		wantErr string
	}{
		{in: "2026-12-01T10:00:00Z", want: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)},
		{in: "2026-12-01T10:00:00.5+01:00", want: time.Date(2026, 12, 1, 9, 0, 0, 500000000, time.UTC)},
		{in: "2h", want: now.Add(-2 * time.Hour)},
		{in: "3d", wantErr: "48h"},
		{in: "-2h", wantErr: "positive duration"},
		{in: "yesterday", wantErr: "RFC 3339"},
	}
	for _, tt := range tests {
		got, err := parseSince(tt.in, now)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "--since") {
				t.Errorf("parseSince(%q) error = %v, want one naming --since and %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !got.Equal(tt.want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

// TestRecoverExactlyOnceNeedsAllowDuplicates: in delivery.mode
// exactly-once, walpost recover exits 1 naming --allow-duplicates and why;
// with the flag it goes on (here to a PostgreSQL that is not there).
func TestRecoverExactlyOnceNeedsAllowDuplicates(t *testing.T) {
	clearWalpostEnv(t)
	t.Setenv("WALPOST_DELIVERY_MODE", "exactly-once")
	t.Setenv("WALPOST_POSTGRES_URL", "postgres://walpost@127.0.0.1:1/walpost?connect_timeout=2")
	t.Setenv("WALPOST_KAFKA_BROKERS", "127.0.0.1:1")
	for _, tt := range []struct {
		args    []string
		refused bool
	}{
		{[]string{"recover"}, true},
		{[]string{"recover", "--since", "2h"}, true},
		{[]string{"recover", "--allow-duplicates"}, false},
	} {
		var stderr strings.Builder
		root := newRootCommand()
		root.SetOut(io.Discard)
		code := execute(context.Background(), root, tt.args, &stderr)
		refused := strings.Contains(stderr.String(), "--allow-duplicates") && strings.Contains(stderr.String(), "read_committed")
		if code != 1 || refused != tt.refused {
			t.Errorf("walpost %s: exit %d, refused %v; want exit 1, refused %v\n%s", strings.Join(tt.args, " "), code, refused, tt.refused, stderr.String())
		}
	}
}
