package forwarder

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/sink"
)

// lockedBuffer is a log destination the forwarder's goroutines write to
// while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSecretFilesNeverShown: a PostgreSQL password and a SASL password
// read from files (WALPOST_POSTGRES_URL_FILE,
// WALPOST_KAFKA_SASL_PASSWORD_FILE) reach the configuration, and appear
// neither in the logs of a forwarder failing to reach PostgreSQL and
// Kafka, nor on /metrics or /readyz.
func TestSecretFilesNeverShown(t *testing.T) {
	const pgSecret, saslSecret = "pg-Secret-4711", "sasl-Secret-0815"
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name string
		sink sink.Sink // nil: the Kafka sink, which fails to connect; Discard: go on to PostgreSQL
		want string    // the log line that shows the failure was logged
	}{
		{"kafka unreachable", nil, "kafka not reachable; retrying"},
		{"postgres unreachable", sink.Discard, "session failed; reconnecting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range config.Keys() {
				if v, ok := os.LookupEnv(k.Env); ok {
					t.Setenv(k.Env, v)
					os.Unsetenv(k.Env)
				}
			}
			t.Setenv("WALPOST_POSTGRES_URL_FILE", write("pg-url", "postgres://walpost:"+pgSecret+"@127.0.0.1:1/walpost?sslmode=disable&connect_timeout=2\n"))
			t.Setenv("WALPOST_KAFKA_BROKERS", "127.0.0.1:1")
			t.Setenv("WALPOST_KAFKA_SASL_MECHANISM", "PLAIN")
			t.Setenv("WALPOST_KAFKA_SASL_USERNAME", "walpost")
			t.Setenv("WALPOST_KAFKA_SASL_PASSWORD_FILE", write("sasl", saslSecret+"\n"))
			t.Setenv("WALPOST_HTTP_LISTEN", freeAddr(t))
			t.Setenv("WALPOST_LOG_LEVEL", "debug")
			cfg, err := config.Load(nil, config.NeedAll)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(cfg.Postgres.URL, pgSecret) || cfg.Kafka.SASL.Password != saslSecret {
				t.Fatalf("secrets not read from their files: url %q, sasl password %q", cfg.Postgres.URL, cfg.Kafka.SASL.Password)
			}
			var logs lockedBuffer
			logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			f, err := New(cfg, Deps{Logger: logger, Sink: tc.sink})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- f.Run(ctx) }()
			defer func() {
				cancel()
				select {
				case <-done:
				case <-time.After(30 * time.Second):
					t.Error("Run did not return 30 s after its context ended")
				}
			}()
			deadline := time.Now().Add(60 * time.Second)
			for !strings.Contains(logs.String(), tc.want) {
				if time.Now().After(deadline) {
					t.Fatalf("no %q logged within 60 s:\n%s", tc.want, logs.String())
				}
				time.Sleep(50 * time.Millisecond)
			}
			pages := map[string]string{}
			for _, path := range []string{"/metrics", "/readyz", "/healthz"} {
				resp, err := http.Get("http://" + cfg.HTTP.Listen + path)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				pages[path] = string(b)
			}
			if !strings.Contains(pages["/metrics"], "walpost_state") {
				t.Fatalf("/metrics does not look like walpost's:\n%s", pages["/metrics"])
			}
			pages["log"] = logs.String()
			for where, text := range pages {
				for _, secret := range []string{pgSecret, saslSecret} {
					if strings.Contains(text, secret) {
						t.Errorf("%s shows the secret %s:\n%s", where, secret, text)
					}
				}
			}
		})
	}
}

// freeAddr is a loopback address no one listens on at the moment.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
