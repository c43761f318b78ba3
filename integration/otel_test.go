package integration

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/walpost/walpost/writer"
)

// otlpReceiver is an in-process OTLP/HTTP trace receiver: it decodes each
// protobuf ExportTraceServiceRequest posted to /v1/traces and keeps the
// spans with their resource's service.name.
type otlpReceiver struct {
	mu      sync.Mutex
	spans   []*tracepb.Span
	service []string
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err != nil || r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
		http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rs := range req.ResourceSpans {
		name := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				name = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				o.spans = append(o.spans, s)
				o.service = append(o.service, name)
			}
		}
	}
	o.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// named returns the spans called name, and their services.
func (o *otlpReceiver) named(name string) ([]*tracepb.Span, []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var spans []*tracepb.Span
	var services []string
	for i, s := range o.spans {
		if s.Name == name {
			spans, services = append(spans, s), append(services, o.service[i])
		}
	}
	return spans, services
}

// TestOTelTransactionSpans: with otel.enabled walpost exports over
// OTLP/HTTP (OTEL_EXPORTER_OTLP_ENDPOINT: an in-process receiver) one span
// per forwarded transaction, linked to the span context of each of its
// rows: two rows written with two trace contexts give one span with both
// links, a row with one a span with its link, a row without a span
// without links; the spans carry service.name and the transaction's xid
// and event count.
func TestOTelTransactionSpans(t *testing.T) {
	t.Parallel()
	rcv := &otlpReceiver{}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	f := newFixture(t, fixtureOpts{partitions: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	outbox, err := writer.NewTable(f.Table)
	if err != nil {
		t.Fatal(err)
	}
	p := f.start("WALPOST_OTEL_ENABLED=true", "OTEL_EXPORTER_OTLP_ENDPOINT="+srv.URL, "OTEL_BSP_SCHEDULE_DELAY=100")
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatalf("walpost did not start streaming:\n%s", tail(p.log, 30))
	}
	parents := []string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"00-11111111111111111111111111111111-2222222222222222-00",
	}
	traced := func(tp string) context.Context {
		c, err := writer.WithTraceContext(ctx, tp, "")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	txns := [][]struct {
		ctx context.Context
	}{
		{{traced(parents[0])}, {traced(parents[1])}},
		{{traced(parents[2])}},
		{{ctx}},
	}
	n := 0
	for _, evs := range txns {
		if err := pgx.BeginFunc(ctx, f.Pool, func(tx pgx.Tx) error {
			for _, ev := range evs {
				n++
				if err := outbox.Insert(ev.ctx, tx, writer.Event{Key: writer.NewKey(), Payload: []byte(`{}`)}); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	recs := f.consumeAll(t, n, 60*time.Second)
	if len(recs) != n {
		t.Fatalf("%d records, want %d", len(recs), n)
	}
	var spans []*tracepb.Span
	var services []string
	waitFor(t, 30*time.Second, "a span per transaction at the receiver", func() bool {
		spans, services = rcv.named("walpost forward")
		return len(spans) >= len(txns)
	})
	if len(spans) != len(txns) {
		t.Fatalf("%d spans, want %d (one per transaction)", len(spans), len(txns))
	}
	got := map[string]bool{}
	for i, s := range spans {
		if services[i] != "walpost" {
			t.Errorf("span service.name %q, want walpost", services[i])
		}
		var links []string
		for _, l := range s.Links {
			links = append(links, "00-"+hex.EncodeToString(l.TraceId)+"-"+hex.EncodeToString(l.SpanId))
		}
		sort.Strings(links)
		var events, xid int64
		for _, a := range s.Attributes {
			switch a.Key {
			case "walpost.events":
				events = a.GetValue().GetIntValue()
			case "walpost.xid":
				xid = a.GetValue().GetIntValue()
			}
		}
		if xid == 0 || events != int64(len(s.Links)) && len(s.Links) > 0 {
			t.Errorf("span %x: xid %d, %d events, %d links", s.SpanId, xid, events, len(s.Links))
		}
		got[strings.Join(links, " ")] = true
	}
	for _, want := range []string{
		parents[1][:52] + " " + parents[0][:52], // sorted
		parents[2][:52],
		"",
	} {
		if !got[want] {
			t.Errorf("no span whose links are %q; got %v", want, got)
		}
	}

	// kotel's publish span of each record: a child of the row's span (a
	// root without one), named in the record's traceparent; a row whose
	// context is not sampled (flags 00) gets an unsampled child, which is
	// not exported, in the row's trace.
	sampled := 0
	for _, tp := range parents {
		if strings.HasSuffix(tp, "-01") {
			sampled++
		}
	}
	var publish []*tracepb.Span
	waitFor(t, 30*time.Second, "a publish span per sampled record at the receiver", func() bool {
		publish, _ = rcv.named(f.Topic + " publish")
		return len(publish) >= sampled+1
	})
	byID := map[string]*tracepb.Span{}
	for _, s := range publish {
		byID[hex.EncodeToString(s.SpanId)] = s
	}
	rowParent := map[string]bool{}
	for _, tp := range parents {
		rowParent[tp[3:35]+"/"+tp[36:52]] = true
	}
	children, roots, unsampled := 0, 0, 0
	for _, r := range recs {
		tp := r.Headers["traceparent"]
		if len(tp) != 55 {
			t.Errorf("record %s: traceparent %q, want the publish span's", r.Key, tp)
			continue
		}
		if strings.HasSuffix(tp, "-00") {
			if tp[3:35] != parents[2][3:35] || byID[tp[36:52]] != nil {
				t.Errorf("record %s: traceparent %s; want the unsampled row's trace, its span not exported", r.Key, tp)
			}
			unsampled++
			continue
		}
		s := byID[tp[36:52]]
		switch {
		case s == nil || hex.EncodeToString(s.TraceId) != tp[3:35]:
			t.Errorf("record %s: traceparent %s names no publish span", r.Key, tp)
		case len(s.ParentSpanId) == 0:
			roots++
		case !rowParent[hex.EncodeToString(s.TraceId)+"/"+hex.EncodeToString(s.ParentSpanId)]:
			t.Errorf("record %s: publish span's parent %x/%x is no row's span", r.Key, s.TraceId, s.ParentSpanId)
		default:
			children++
		}
	}
	if children != sampled || roots != 1 || unsampled != 1 {
		t.Errorf("publish spans: %d children of a sampled row's span (want %d), %d roots (want 1), %d unsampled (want 1)", children, sampled, roots, unsampled)
	}
}
