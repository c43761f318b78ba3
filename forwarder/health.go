package forwarder

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ready says whether walpost makes progress, or stands by ready to take
// over, and why not.
//
// A standby (waiting-for-slot: another process holds the slot) is ready:
// it has connected to PostgreSQL, found the slot and retries every few
// seconds, so it takes over within seconds when the holder stops. Were it
// unready, a rolling update with maxUnavailable 0 could never replace the
// second replica, and a PodDisruptionBudget would count it as down. Whether
// anyone streams is visible in walpost_state (an alert fires when no
// instance streams), and the stall and retained-WAL checks below apply to
// the instance that streams.
func (f *Forwarder) ready() (bool, string) {
	m, cfg := f.m, f.cfg
	st := m.currentState()
	if st == stateWaitingForSlot {
		return true, "standing by: the slot is held by another process; ready to take over"
	}
	if st != stateStreaming && st != stateBackpressured {
		if n := m.failures.Load(); st == stateReconnecting && n > 0 {
			return false, fmt.Sprintf("not streaming: state %s, %d session failures in a row without progress", st, n)
		} else if st == stateReconnecting {
			return false, "not streaming: state " + st + " after a session that delivered events"
		}
		return false, "not streaming: state " + st
	}
	if t, b := m.tracker.Load(), m.budget.Load(); t != nil && b != nil {
		if events, _ := b.InFlight(); events > 0 || t.Pending() {
			stalled := time.Since(time.Unix(0, m.movedAt.Load()))
			if stalled > cfg.HTTP.ReadyStallTimeout {
				return false, fmt.Sprintf("events are pending (%d in flight) and the confirmed LSN has not moved for %s (http.ready_stall_timeout %s)",
					events, stalled.Round(time.Second), cfg.HTTP.ReadyStallTimeout)
			}
		}
	}
	if limit := cfg.HTTP.ReadyMaxRetainedBytes; limit > 0 {
		if r := m.retainedB.Load(); r > limit {
			return false, fmt.Sprintf("the slot retains %d bytes of WAL, above http.ready_max_retained_bytes %d", r, limit)
		}
	}
	if why := m.unprotected.Load(); why != nil {
		return true, "streaming; " + *why
	}
	return true, "streaming"
}

// httpServer serves /metrics, /healthz, /readyz and Go's profiler.
type httpServer struct {
	f   *Forwarder
	ln  net.Listener
	srv *http.Server
}

// listenHTTP binds http.listen before anything else starts, so a port in
// use fails walpost at once with the key to fix; nil when it is empty.
func (f *Forwarder) listenHTTP() (*httpServer, error) {
	if f.cfg.HTTP.Listen == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", f.cfg.HTTP.Listen)
	if err != nil {
		return nil, fmt.Errorf("http.listen %s (WALPOST_HTTP_LISTEN): %w; choose a free address, or set it empty to disable the server", f.cfg.HTTP.Listen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(f.reg, promhttp.HandlerOpts{Registry: f.reg}))
	if f.cfg.HTTP.PProf {
		// Go's profiler, for performance investigations (go tool pprof
		// http://HOST/debug/pprof/profile), only when asked for. Not
		// /debug/pprof/cmdline: the command line may carry a password.
		mux.HandleFunc("/debug/pprof/", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/debug/pprof/cmdline" {
				http.NotFound(w, r)
				return
			}
			pprof.Index(w, r)
		})
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, reason := f.ready()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = w.Write([]byte(reason + "\n"))
	})
	return &httpServer{f: f, ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}, nil
}

// run serves until ctx ends, then shuts the server down (waiting up to 5 s
// for requests in progress) and returns once Serve has returned.
func (h *httpServer) run(ctx context.Context) error {
	h.f.log.Info("serving metrics and health", "addr", h.ln.Addr().String())
	served := make(chan error, 1)
	go func() { served <- h.srv.Serve(h.ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("http.listen %s: %w", h.f.cfg.HTTP.Listen, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = h.srv.Shutdown(sctx)
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
