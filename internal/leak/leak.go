// Package leak is goleak for tests whose goroutines take a moment to
// wind down after Close (franz-go's and kfake's connection goroutines, a
// timer that fires once more): goleak v1.3.0 retries for about 0.4 s and
// exports no option to wait longer, which a loaded machine overruns.
// Only tests import it.
package leak

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Wait is how long a leak may take to go away before it counts.
const Wait = 10 * time.Second

// Find calls goleak.Find(opts...) until it finds nothing or Wait has
// passed, and returns its last error.
func Find(opts ...goleak.Option) error {
	deadline := time.Now().Add(Wait)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// VerifyNone is goleak.VerifyNone with Find's wait:
//
//	defer leak.VerifyNone(t, goleak.IgnoreCurrent())
func VerifyNone(t testing.TB, opts ...goleak.Option) {
	t.Helper()
	if err := Find(opts...); err != nil {
		t.Error(err)
	}
}

// VerifyTestMain is goleak.VerifyTestMain with Find's wait: it runs the
// tests and, when they passed, fails the run if goroutines are left.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	if code == 0 {
		if err := Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "leak: goroutines left after a successful test run (waited %s): %v\n", Wait, err)
			code = 1
		}
	}
	os.Exit(code)
}
