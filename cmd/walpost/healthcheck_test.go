package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHealthcheck: walpost healthcheck exits 0 when /healthz on
// http.listen answers 200, and 1 naming the URL when it does not or
// nothing listens.
func TestHealthcheck(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
	}))
	addr := strings.TrimPrefix(srv.URL, "http://")
	run := func() (int, string) {
		clearWalpostEnv(t)
		t.Setenv("WALPOST_HTTP_LISTEN", addr)
		var stderr strings.Builder
		root := newRootCommand()
		root.SetOut(io.Discard)
		return execute(context.Background(), root, []string{"healthcheck"}, &stderr), stderr.String()
	}
	if code, out := run(); code != 0 {
		t.Fatalf("healthy: exit %d, stderr %q", code, out)
	}
	status = http.StatusServiceUnavailable
	if code, out := run(); code != 1 || !strings.Contains(out, addr+"/healthz") || !strings.Contains(out, "503") {
		t.Errorf("503: exit %d, stderr %q, want 1 naming the URL and status", code, out)
	}
	srv.Close()
	if code, out := run(); code != 1 || !strings.Contains(out, addr) {
		t.Errorf("nothing listening: exit %d, stderr %q, want 1 naming the address", code, out)
	}
}
