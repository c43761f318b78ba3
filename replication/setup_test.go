package replication

import (
	"testing"
	"time"
)

// TestReceiveTimeoutFor: the receive timeout stays above the server's
// wal_sender_timeout (which bounds how long a live server replaying an
// unrelated transaction is silent), never below what is configured, and
// is left alone when the server never times out (0).
func TestReceiveTimeoutFor(t *testing.T) {
	for _, tc := range []struct {
		configured, sender, want time.Duration
	}{
		{30 * time.Second, 90 * time.Second, 90*time.Second + SenderTimeoutMargin},
		{30 * time.Second, 60 * time.Second, 60*time.Second + SenderTimeoutMargin},
		{30 * time.Second, 20 * time.Second, 30 * time.Second},
		{2 * time.Minute, 90 * time.Second, 2 * time.Minute},
		{30 * time.Second, 0, 30 * time.Second},
		{2 * time.Second, 500 * time.Millisecond, 500*time.Millisecond + SenderTimeoutMargin},
	} {
		if got := ReceiveTimeoutFor(tc.configured, tc.sender); got != tc.want {
			t.Errorf("ReceiveTimeoutFor(%s, wal_sender_timeout %s) = %s, want %s", tc.configured, tc.sender, got, tc.want)
		}
	}
}
