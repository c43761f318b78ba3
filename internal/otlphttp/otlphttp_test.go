package otlphttp

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

var _ otlptrace.Client = (*Client)(nil)

// envOf is a getenv over m.
func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// receiver records the requests it gets and answers each with the next of
// its replies (the last one repeated; none: 200 with an empty body).
type receiver struct {
	mu      sync.Mutex
	reqs    []received
	replies []func(http.ResponseWriter, *http.Request)
}

type received struct {
	at     time.Time
	path   string
	header http.Header
	body   []byte // as sent, compressed or not
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	n := len(rc.reqs)
	rc.reqs = append(rc.reqs, received{time.Now(), r.URL.Path, r.Header.Clone(), body})
	var reply func(http.ResponseWriter, *http.Request)
	if len(rc.replies) > 0 {
		reply = rc.replies[min(n, len(rc.replies)-1)]
	}
	rc.mu.Unlock()
	if reply != nil {
		reply(w, r)
	}
}

func (rc *receiver) got() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.reqs...)
}

// status replies code with Retry-After retry (when not empty) and body.
func status(code int, retry, body string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		if retry != "" {
			w.Header().Set("Retry-After", retry)
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

// spans is two resources' spans, as otlptrace hands them to a client.
func spans() []*tracepb.ResourceSpans {
	str := func(k, v string) *commonpb.KeyValue {
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
	}
	rs := func(service, span string) *tracepb.ResourceSpans {
		return &tracepb.ResourceSpans{
			Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{str("service.name", service)}},
			ScopeSpans: []*tracepb.ScopeSpans{{
				Scope: &commonpb.InstrumentationScope{Name: "github.com/walpost/walpost/forwarder"},
				Spans: []*tracepb.Span{{
					TraceId: bytes.Repeat([]byte{1}, 16), SpanId: bytes.Repeat([]byte{2}, 8),
					Name: span, Kind: tracepb.Span_SPAN_KIND_INTERNAL,
					StartTimeUnixNano: 1, EndTimeUnixNano: 2,
					Attributes: []*commonpb.KeyValue{str("walpost.commit_lsn", "0/16B3748")},
				}},
			}},
		}
	}
	return []*tracepb.ResourceSpans{rs("walpost", "walpost forward"), rs("other", "topic publish")}
}

// client is the client of env (OTEL_EXPORTER_OTLP_ENDPOINT: srv's URL
// unless env names an endpoint), with a 10 ms first back-off.
func client(t *testing.T, srv *httptest.Server, env map[string]string) *Client {
	t.Helper()
	if env == nil {
		env = map[string]string{}
	}
	if env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "" && env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] == "" {
		env["OTEL_EXPORTER_OTLP_ENDPOINT"] = srv.URL
	}
	cfg, err := FromEnv(envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	cfg.UserAgent = "walpost/test"
	c := New(cfg, nil)
	c.firstBackoff = 10 * time.Millisecond
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

// decode checks body is an ExportTraceServiceRequest of want, byte for
// byte what proto.Marshal gives for the collector's message.
func decode(t *testing.T, body []byte, want []*tracepb.ResourceSpans) {
	t.Helper()
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		t.Fatalf("the body is not an ExportTraceServiceRequest: %v", err)
	}
	if !proto.Equal(&req, &coltracepb.ExportTraceServiceRequest{ResourceSpans: want}) {
		t.Fatalf("decoded %v, want the spans sent", &req)
	}
	ref, err := proto.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: want})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(body, ref) {
		t.Errorf("the body differs from proto.Marshal of the collector's message")
	}
}

func TestUploadTraces(t *testing.T) {
	t.Parallel()
	rc := &receiver{}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	c := client(t, srv, nil)
	sent := spans()
	if err := c.UploadTraces(context.Background(), sent); err != nil {
		t.Fatal(err)
	}
	reqs := rc.got()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.path != "/v1/traces" {
		t.Errorf("path %q, want /v1/traces", r.path)
	}
	for k, want := range map[string]string{"Content-Type": "application/x-protobuf", "User-Agent": "walpost/test", "Content-Encoding": ""} {
		if got := r.header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	decode(t, r.body, sent)
}

func TestEndpoint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{nil, "http://localhost:4318/v1/traces"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, "http://collector:4318/v1/traces"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector:4318/"}, "https://collector:4318/v1/traces"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": " http://collector:4318/otlp/ "}, "http://collector:4318/otlp/v1/traces"},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/custom/traces"}, "http://collector:4318/custom/traces"},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://collector:4318"}, "https://collector:4318/"},
		{map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT":        "http://generic:4318",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://traces:4318/v1/traces",
		}, "http://traces:4318/v1/traces"},
	} {
		cfg, err := FromEnv(envOf(tc.env))
		if err != nil {
			t.Errorf("%v: %v", tc.env, err)
			continue
		}
		if got := cfg.URL.String(); got != tc.want {
			t.Errorf("%v: %s, want %s", tc.env, got, tc.want)
		}
	}
}

func TestHeaders(t *testing.T) {
	t.Parallel()
	rc := &receiver{}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	c := client(t, srv, map[string]string{
		"OTEL_EXPORTER_OTLP_HEADERS": "api-key=secret%20value%2Cwith%3Dcomma , X-Tenant = a=b,User-Agent=collector-side-name",
	})
	if err := c.UploadTraces(context.Background(), spans()); err != nil {
		t.Fatal(err)
	}
	h := rc.got()[0].header
	for k, want := range map[string]string{
		"Api-Key":      "secret value,with=comma",
		"X-Tenant":     "a=b",
		"User-Agent":   "collector-side-name",
		"Content-Type": "application/x-protobuf",
	} {
		if got := h.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}

	// The traces variable replaces the generic one.
	cfg, err := FromEnv(envOf(map[string]string{
		"OTEL_EXPORTER_OTLP_HEADERS":        "a=1,b=2",
		"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "c=3",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Headers) != 1 || cfg.Headers["c"] != "3" {
		t.Errorf("headers %v, want only c=3", cfg.Headers)
	}
}

func TestGzip(t *testing.T) {
	t.Parallel()
	rc := &receiver{}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	c := client(t, srv, map[string]string{"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "gzip", "OTEL_EXPORTER_OTLP_COMPRESSION": "none"})
	sent := spans()
	if err := c.UploadTraces(context.Background(), sent); err != nil {
		t.Fatal(err)
	}
	r := rc.got()[0]
	if got := r.header.Get("Content-Encoding"); got != "gzip" {
		t.Fatalf("Content-Encoding %q, want gzip", got)
	}
	zr, err := gzip.NewReader(bytes.NewReader(r.body))
	if err != nil {
		t.Fatalf("the body is not gzip: %v", err)
	}
	body, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	decode(t, body, sent)
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	rc := &receiver{replies: []func(http.ResponseWriter, *http.Request){func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(3 * time.Second):
		}
	}}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	c := client(t, srv, map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "200"})
	start := time.Now()
	err := c.UploadTraces(context.Background(), spans())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the deadline's", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the export took %s with a 200 ms timeout", d)
	}
	if cfg, err := FromEnv(envOf(nil)); err != nil || cfg.Timeout != 10*time.Second {
		t.Errorf("default timeout %s (%v), want 10s", cfg.Timeout, err)
	}
}

func TestRetry(t *testing.T) {
	t.Parallel()
	t.Run("503 with Retry-After, then 200", func(t *testing.T) {
		t.Parallel()
		rc := &receiver{replies: []func(http.ResponseWriter, *http.Request){status(503, "1", "busy"), status(200, "", "")}}
		srv := httptest.NewServer(rc)
		defer srv.Close()
		c := client(t, srv, nil)
		sent := spans()
		if err := c.UploadTraces(context.Background(), sent); err != nil {
			t.Fatal(err)
		}
		reqs := rc.got()
		if len(reqs) != 2 {
			t.Fatalf("%d requests, want 2", len(reqs))
		}
		if gap := reqs[1].at.Sub(reqs[0].at); gap < 900*time.Millisecond {
			t.Errorf("retried after %s, want Retry-After's 1 s", gap)
		}
		decode(t, reqs[1].body, sent)
	})
	t.Run("429, 502, 504 back off", func(t *testing.T) {
		t.Parallel()
		rc := &receiver{replies: []func(http.ResponseWriter, *http.Request){status(429, "", ""), status(502, "", ""), status(504, "", ""), status(200, "", "")}}
		srv := httptest.NewServer(rc)
		defer srv.Close()
		if err := client(t, srv, nil).UploadTraces(context.Background(), spans()); err != nil {
			t.Fatal(err)
		}
		if n := len(rc.got()); n != 4 {
			t.Fatalf("%d requests, want 4", n)
		}
	})
	t.Run("gives up at the deadline", func(t *testing.T) {
		t.Parallel()
		rc := &receiver{replies: []func(http.ResponseWriter, *http.Request){status(503, "", "still busy")}}
		srv := httptest.NewServer(rc)
		defer srv.Close()
		// 1 s: long enough for the first answer under -race on a busy
		// machine (300 ms sometimes was not, and the error was the
		// deadline alone).
		c := client(t, srv, map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "1000"})
		start := time.Now()
		err := c.UploadTraces(context.Background(), spans())
		if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "still busy") {
			t.Fatalf("err %v, want the 503 and its body", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("gave up after %s with a 1 s timeout", d)
		}
		if n := len(rc.got()); n < 2 {
			t.Errorf("%d requests, want retries", n)
		}
	})
	t.Run("a Retry-After past the deadline is not waited for", func(t *testing.T) {
		t.Parallel()
		rc := &receiver{replies: []func(http.ResponseWriter, *http.Request){status(429, "60", "")}}
		srv := httptest.NewServer(rc)
		defer srv.Close()
		start := time.Now()
		err := client(t, srv, map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "2000"}).UploadTraces(context.Background(), spans())
		if err == nil || !strings.Contains(err.Error(), "429") {
			t.Fatalf("err %v, want the 429", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("gave up after %s", d)
		}
	})
}

func TestStatusError(t *testing.T) {
	t.Parallel()
	rc := &receiver{replies: []func(http.ResponseWriter, *http.Request){status(400, "", "invalid span: trace_id is empty\n"+strings.Repeat("x", 1000))}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	err := client(t, srv, nil).UploadTraces(context.Background(), spans())
	if err == nil {
		t.Fatal("a 400 was a success")
	}
	for _, want := range []string{"400 Bad Request", "invalid span: trace_id is empty", srv.URL + "/v1/traces"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err %q does not hold %q", err, want)
		}
	}
	if len(err.Error()) > 600 {
		t.Errorf("err is %d bytes long: the body is not cut", len(err.Error()))
	}
	if n := len(rc.got()); n != 1 {
		t.Errorf("%d requests, want 1 (a 400 is not retried)", n)
	}
}

func TestPartialSuccess(t *testing.T) {
	t.Parallel()
	resp, err := proto.Marshal(&coltracepb.ExportTraceServiceResponse{PartialSuccess: &coltracepb.ExportTracePartialSuccess{RejectedSpans: 2, ErrorMessage: "spans too old"}})
	if err != nil {
		t.Fatal(err)
	}
	rc := &receiver{replies: []func(http.ResponseWriter, *http.Request){func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(resp)
	}}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	c := client(t, srv, nil)
	var logs bytes.Buffer
	c.log = slog.New(slog.NewTextHandler(&logs, nil))
	if err := c.UploadTraces(context.Background(), spans()); err != nil {
		t.Fatalf("a partial success is an error: %v", err)
	}
	for _, want := range []string{"level=WARN", "rejected_spans=2", `message="spans too old"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log %q does not hold %q", logs.String(), want)
		}
	}
}

func TestTLS(t *testing.T) {
	t.Parallel()
	rc := &receiver{}
	srv := httptest.NewTLSServer(rc)
	defer srv.Close()
	ca := serverCA(t, srv, t.TempDir())
	c := client(t, srv, map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": ca})
	if err := c.UploadTraces(context.Background(), spans()); err != nil {
		t.Fatalf("with the server's CA: %v", err)
	}
	if n := len(rc.got()); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
	// Without it the system's CAs do not know the test server.
	err := client(t, srv, nil).UploadTraces(context.Background(), spans())
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA: err %v, want a certificate error", err)
	}
}

func TestStop(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	rc := &receiver{replies: []func(http.ResponseWriter, *http.Request){func(_ http.ResponseWriter, r *http.Request) {
		close(arrived)
		select {
		case <-r.Context().Done():
		case <-time.After(3 * time.Second):
		}
	}}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	c := client(t, srv, nil)
	done := make(chan error, 1)
	go func() { done <- c.UploadTraces(context.Background(), spans()) }()
	<-arrived
	_ = c.Stop(context.Background())
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err %v, want the export cancelled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Stop did not interrupt the export in flight")
	}
}
