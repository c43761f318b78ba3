package forwarder

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

// TestReadyStandby: a standby waiting for the slot is ready (a rolling
// update can replace it; it takes over within seconds), and walpost_ready
// says so; starting and reconnecting are not ready.
func TestReadyStandby(t *testing.T) {
	reg := prometheus.NewRegistry()
	f, err := New(testConfig(t), Deps{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		state  string
		ready  bool
		reason string
	}{
		{stateStarting, false, "state starting"},
		{stateWaitingForSlot, true, "standing by"},
		{stateReconnecting, false, "state reconnecting"},
		{stateStreaming, true, "streaming"},
		{stateStopped, false, "state stopped"},
	} {
		f.m.setState(tc.state)
		ok, reason := f.ready()
		if ok != tc.ready || !strings.Contains(reason, tc.reason) {
			t.Errorf("state %s: ready = %v %q, want %v naming %q", tc.state, ok, reason, tc.ready, tc.reason)
		}
		want := 0.0
		if tc.ready {
			want = 1
		}
		if got := gaugeValue(t, reg, "walpost_ready"); got != want {
			t.Errorf("state %s: walpost_ready = %v, want %v", tc.state, got, want)
		}
	}
}

// gaugeValue is the value of the gauge name (one series) in reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no single series %s", name)
	return 0
}
