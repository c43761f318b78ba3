package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// TestResendWhereRefused: walpost resend refuses a --where with a
// subquery, a function call that writes, or a semicolon with exit 2 and a
// message naming --where and what was refused, before it reads the
// configuration or connects (no postgres.url is set). (Mutation: not
// calling resend.ParseWhere in the command fails it: the command then
// fails on the missing postgres.url instead.)
func TestResendWhereRefused(t *testing.T) {
	clearWalpostEnv(t)
	for _, tt := range []struct {
		where, want string
	}{
		{"event_type IN (SELECT event_type FROM outbox)", "a subquery"},
		{"nextval('outbox_seq') > 0", "function nextval()"},
		{"event_type = 'x'; DELETE FROM outbox", "a semicolon"},
		{"pg_catalog.pg_terminate_backend(1)", "function pg_catalog.pg_terminate_backend()"},
	} {
		var stderr strings.Builder
		root := newRootCommand()
		root.SetOut(io.Discard)
		code := execute(context.Background(), root, []string{"resend", "--where", tt.where}, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), "--where") || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("walpost resend --where %q: exit %d, want %d naming --where and %q:\n%s", tt.where, code, exitUsage, tt.want, stderr.String())
		}
	}
}

// TestResendFlagsRefused: malformed or contradicting flags exit 2 naming
// the flag.
func TestResendFlagsRefused(t *testing.T) {
	clearWalpostEnv(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--since", "yesterday"}, "--since"},
		{[]string{"--until", "3d"}, "48h"},
		{[]string{"--since", "1h", "--until", "2h"}, "--until"},
		{[]string{"--resume", "--where", "true"}, "--resume"},
		{[]string{"--max-rate", "-5"}, "--max-rate"},
		{[]string{"--topic", "no spaces"}, "--topic"},
		{[]string{"--key", ""}, "--key"},
		{[]string{"--where", ""}, "empty"},
	} {
		var stderr strings.Builder
		root := newRootCommand()
		root.SetOut(io.Discard)
		code := execute(context.Background(), root, append([]string{"resend"}, tt.args...), &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("walpost resend %s: exit %d, want %d naming %q:\n%s", strings.Join(tt.args, " "), code, exitUsage, tt.want, stderr.String())
		}
	}
}

func TestParseTimeFlag(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	if got, err := parseTimeFlag("--until", "90m", now); err != nil || !got.Equal(now.Add(-90*time.Minute)) {
		t.Errorf("parseTimeFlag(90m) = %v, %v", got, err)
	}
	if got, err := parseTimeFlag("--until", "2026-12-01T10:00:00+01:00", now); err != nil || !got.Equal(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)) {
		t.Errorf("parseTimeFlag(RFC 3339) = %v, %v", got, err)
	}
	if _, err := parseTimeFlag("--until", "-2h", now); err == nil || !strings.Contains(err.Error(), "--until") {
		t.Errorf("parseTimeFlag(-2h) = %v, want an error naming --until", err)
	}
}
