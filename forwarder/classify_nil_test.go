package forwarder

import (
	"context"
	"testing"
)

// TestClassifyNil: a session that ended without an error is a clean stop
// when walpost is shutting down, and Fail otherwise: nothing but a
// shutdown ends a session without an error, and retrying would hide the
// bug (the session loop then returns nil and Run reports "session loop
// ended without a shutdown"; the loop's retry log line has no error to
// print).
func TestClassifyNil(t *testing.T) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		action Action
	}{
		{"shutting down", ended, Stop},
		{"not shutting down", context.Background(), Fail},
	} {
		if a, cause := Classify(tc.ctx, nil); a != tc.action || cause != "" {
			t.Errorf("%s: Classify(ctx, nil) = %s, %q; want %s, \"\"", tc.name, a, cause, tc.action)
		}
	}
}
