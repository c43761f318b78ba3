package otlphttp

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFromEnvErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		env  map[string]string
		want []string // in the error, in this order
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "10s"}, []string{"OTEL_EXPORTER_OTLP_TIMEOUT", `"10s"`, "milliseconds"}},
		{map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "-1"}, []string{"OTEL_EXPORTER_OTLP_TIMEOUT", "≥ 0"}},
		{map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "5000", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "soon"}, []string{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", `"soon"`}},
		{map[string]string{"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"}, []string{"OTEL_EXPORTER_OTLP_COMPRESSION", `"zstd"`, "gzip or none"}},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "GZIP"}, []string{"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip or none"}},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4318"}, []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http:// or https://"}},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "grpc://collector:4317"}, []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http:// or https://"}},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://user:hunter2@collector:4318/%zz"}, []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "not a URL"}},
		{map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20hunter2,tenant"}, []string{"OTEL_EXPORTER_OTLP_HEADERS", "member 2", "key=value"}},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "bad key=hunter2"}, []string{"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "member 1", `"bad key"`, "header name"}},
		{map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "authorization=hunter2%zz"}, []string{"OTEL_EXPORTER_OTLP_HEADERS", "member 1 (authorization)", "URL-encoded"}},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf only"}},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf only"}},
		{map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": missing}, []string{"OTEL_EXPORTER_OTLP_CERTIFICATE", "missing.pem"}},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": junk}, []string{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "no PEM certificate"}},
		{map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": junk}, []string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "without OTEL_EXPORTER_OTLP_CLIENT_KEY"}},
		{map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_KEY": junk}, []string{"OTEL_EXPORTER_OTLP_CLIENT_KEY", "without OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"}},
		{map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": junk, "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY": junk}, []string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "PEM"}},
		{map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": testCA(t, dir)}, []string{"OTEL_EXPORTER_OTLP_CERTIFICATE is set", "http://localhost:4318/v1/traces", "not https"}},
	} {
		_, err := FromEnv(envOf(tc.env))
		if err == nil {
			t.Errorf("%v: no error", tc.env)
			continue
		}
		msg, rest := err.Error(), err.Error()
		for _, w := range tc.want {
			i := strings.Index(rest, w)
			if i < 0 {
				t.Errorf("%v: %q does not hold %q (in order)", tc.env, msg, w)
				break
			}
			rest = rest[i+len(w):]
		}
		if strings.Contains(msg, "hunter2") {
			t.Errorf("%v: %q shows a secret", tc.env, msg)
		}
	}
}

func TestFromEnvDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := FromEnv(envOf(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TIMEOUT": "0"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.URL.String() != "http://localhost:4318/v1/traces" || cfg.Headers != nil || cfg.Timeout != 0 || cfg.Gzip || cfg.TLS != nil {
		t.Errorf("%+v, want the defaults with no timeout", cfg)
	}
	cfg, err = FromEnv(envOf(map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "1500", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "250"}))
	if err != nil || cfg.Timeout != 250*time.Millisecond {
		t.Errorf("timeout %s (%v), want the traces variable's 250ms", cfg.Timeout, err)
	}
}
