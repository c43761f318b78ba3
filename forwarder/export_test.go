package forwarder

import (
	"context"
	"time"
)

// SetBackoffWait replaces the wait before re-sending a record that failed
// alone; set it before Run starts.
func SetBackoffWait(i *isolator, wait func(ctx context.Context, d time.Duration) bool) {
	i.backoffWait = wait
}
