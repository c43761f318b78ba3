package forwarder

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/leak"
)

func testConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Postgres.URL = "postgres://walpost@127.0.0.1:1/walpost"
	cfg.Kafka.Brokers = []string{"127.0.0.1:1"}
	return cfg
}

// TestHTTPServerLifecycle: the server answers while its context lives and,
// once it ends, shuts down and returns with every goroutine it started
// joined.
func TestHTTPServerLifecycle(t *testing.T) {
	defer leak.VerifyNone(t, goleak.IgnoreCurrent())
	cfg := testConfig(t)
	cfg.HTTP.Listen = "127.0.0.1:0"
	f, err := New(cfg, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := f.listenHTTP()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.run(ctx) }()
	cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := cl.Get("http://" + srv.ln.Addr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "state starting") {
		t.Fatalf("/readyz before streaming = %d %q, want 503 naming the state", resp.StatusCode, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run = %v, want nil after shutdown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
}

// TestHTTPListenInUse: an address in use fails at once, naming the key and
// its variable.
func TestHTTPListenInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := testConfig(t)
	cfg.HTTP.Listen = ln.Addr().String()
	f, err := New(cfg, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	err = f.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "http.listen") || !strings.Contains(err.Error(), "WALPOST_HTTP_LISTEN") {
		t.Fatalf("Run with http.listen in use = %v, want an error naming http.listen and WALPOST_HTTP_LISTEN", err)
	}
}

// TestPProfOptIn: the profiler is off unless http.pprof asks for it, and
// the command line (which may carry a password) is never served.
func TestPProfOptIn(t *testing.T) {
	for _, on := range []bool{false, true} {
		cfg := testConfig(t)
		cfg.HTTP.Listen = "127.0.0.1:0"
		cfg.HTTP.PProf = on
		f, err := New(cfg, Deps{})
		if err != nil {
			t.Fatal(err)
		}
		srv, err := f.listenHTTP()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.run(ctx) }()
		status := func(path string) int {
			resp, err := http.Get("http://" + srv.ln.Addr().String() + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		wantIndex := http.StatusNotFound
		if on {
			wantIndex = http.StatusOK
		}
		if got := status("/debug/pprof/"); got != wantIndex {
			t.Errorf("http.pprof=%v: /debug/pprof/ = %d, want %d", on, got, wantIndex)
		}
		if got := status("/debug/pprof/cmdline"); got != http.StatusNotFound {
			t.Errorf("http.pprof=%v: /debug/pprof/cmdline = %d, want 404", on, got)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
