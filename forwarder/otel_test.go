package forwarder

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/walpost/walpost/config"
)

// TestTracerProviderExport: the tracer provider of otel.enabled posts its
// spans as OTLP/HTTP protobuf to OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces,
// with the resource's service.name and a User-Agent naming walpost.
func TestTracerProviderExport(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var reqs []*coltracepb.ExportTraceServiceRequest
	var agents []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		reqs, agents = append(reqs, &req), append(agents, r.Header.Get("User-Agent"))
		mu.Unlock()
	}))
	defer srv.Close()
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL}
	ctx := context.Background()
	tp, err := newTracerProvider(ctx, config.OTel{Enabled: true, ServiceName: "walpost-test"}, func(k string) string { return env[k] }, "v9.9.9", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("test").Start(ctx, spanName)
	span.End()
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reqs) != 1 {
		t.Fatalf("%d exports, want 1", len(reqs))
	}
	if agents[0] != "walpost/v9.9.9" {
		t.Errorf("User-Agent %q, want walpost/v9.9.9", agents[0])
	}
	rs := reqs[0].GetResourceSpans()
	if len(rs) != 1 || len(rs[0].GetScopeSpans()) != 1 || len(rs[0].GetScopeSpans()[0].GetSpans()) != 1 {
		t.Fatalf("export %v, want one span", reqs[0])
	}
	if got := rs[0].GetScopeSpans()[0].GetSpans()[0].GetName(); got != spanName {
		t.Errorf("span %q, want %q", got, spanName)
	}
	if got := rs[0].GetResource().GetAttributes(); len(got) != 1 || got[0].GetKey() != "service.name" || got[0].GetValue().GetStringValue() != "walpost-test" {
		t.Errorf("resource %v, want service.name walpost-test", got)
	}
}

// TestTracerProviderBadEnv: an OTEL_EXPORTER_OTLP_* value the exporter
// cannot use stops walpost at start, the variable named.
func TestTracerProviderBadEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "br"}
	_, err := newTracerProvider(context.Background(), config.OTel{Enabled: true, ServiceName: "walpost"}, func(k string) string { return env[k] }, "dev", slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "otel.enabled") || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION") {
		t.Fatalf("err %v, want otel.enabled and the variable named", err)
	}
}
