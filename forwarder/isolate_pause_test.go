package forwarder

import (
	"testing"
	"time"

	"github.com/walpost/walpost/config"
)

// TestAttemptPause: the pause doubles from poison.backoff and stops at
// config.PoisonBackoffCap, however many attempts poison.max_attempts allows.
func TestAttemptPause(t *testing.T) {
	for _, tt := range []struct {
		first time.Duration
		n     int
		want  time.Duration
	}{
		{200 * time.Millisecond, 1, 200 * time.Millisecond},
		{200 * time.Millisecond, 2, 400 * time.Millisecond},
		{200 * time.Millisecond, 8, 25600 * time.Millisecond},
		{200 * time.Millisecond, 9, config.PoisonBackoffCap},
		{200 * time.Millisecond, 40, config.PoisonBackoffCap},
		{200 * time.Millisecond, 64, config.PoisonBackoffCap},
		{200 * time.Millisecond, 1000, config.PoisonBackoffCap},
		{time.Millisecond, 70, config.PoisonBackoffCap},
		{config.PoisonBackoffCap, 3, config.PoisonBackoffCap},
	} {
		if got := attemptPause(tt.first, tt.n); got != tt.want {
			t.Errorf("attemptPause(%s, %d) = %s, want %s", tt.first, tt.n, got, tt.want)
		}
	}
}
