package main

import (
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
