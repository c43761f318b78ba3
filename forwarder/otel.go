package forwarder

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/otlphttp"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink/kafka"
)

// walpost's own spans (config otel.*, docs/tracing.md): one span per
// forwarded transaction, from the first of its outbox events read off the
// slot to the status update that confirms its end LSN, linked to the span
// context each of its rows carries (the tracing column, or the
// traceparent of the row's headers). Off, no tracer exists and the
// session's handler is not wrapped: nothing per event.

// spanName is the name of a forwarded transaction's span.
const spanName = "walpost forward"

// newTracerProvider builds the tracer provider of cfg: OTLP/HTTP to the
// endpoint of the OTEL_EXPORTER_OTLP_* variables (otlphttp.FromEnv, read
// through getenv), batched. A variable it cannot use is an error naming
// it. The User-Agent names walpost's version; log receives what the
// receiver reports as a partial success.
func newTracerProvider(ctx context.Context, cfg config.OTel, getenv func(string) string, version string, log *slog.Logger) (*sdktrace.TracerProvider, error) {
	ccfg, err := otlphttp.FromEnv(getenv)
	if err != nil {
		return nil, fmt.Errorf("otel.enabled: the OTLP/HTTP exporter: %w", err)
	}
	ccfg.UserAgent = "walpost/" + version
	exp, err := otlptrace.New(ctx, otlphttp.New(ccfg, log))
	if err != nil {
		return nil, fmt.Errorf("otel.enabled: the OTLP/HTTP exporter: %w", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", cfg.ServiceName))
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// traceProducer adds franz-go's kotel hooks to the producer of kcfg: a
// "publish" span per record, child of the span context its row carries
// (a root span for a row without one), whose context kotel writes into
// the record's traceparent and tracestate headers (W3C), replacing the
// row's.
func (k kafkaHooks) traceProducer(kcfg *kafka.Config) {
	tr := kotel.NewTracer(kotel.TracerProvider(k.tp), kotel.TracerPropagator(propagation.TraceContext{}), kotel.ClientID(kcfg.ClientID))
	kcfg.ProducerOpts = append(kcfg.ProducerOpts, kgo.WithHooks(kotel.NewKotel(kotel.WithTracer(tr)).Hooks()...))
	tracing := k.cfg.Mapping.TracingColumn != ""
	kcfg.RecordContext = func(parent context.Context, ev *outbox.Event) context.Context {
		if sc, ok := rowSpanContext(ev, tracing); ok {
			return trace.ContextWithRemoteSpanContext(parent, sc)
		}
		return parent
	}
}

// txnSpans keeps the spans of the transactions a session forwards.
type txnSpans struct {
	tracer  trace.Tracer
	tracing bool // the mapping has a tracing column (debezium profile)

	mu      sync.Mutex
	cur     trace.Span // the transaction being read; nil between transactions
	n       int        // its events
	pending []pendingSpan
}

type pendingSpan struct {
	end  pglogrepl.LSN
	span trace.Span
}

// handler wraps h: each event opens or extends its transaction's span.
func (s *txnSpans) handler(h replication.Handler) replication.Handler {
	return replication.HandlerFuncs{
		EmitFunc: func(ev *outbox.Event, t checkpoint.Ticket) {
			s.emit(ev)
			h.Emit(ev, t)
		},
		CommitFunc: func(end pglogrepl.LSN) {
			s.commit(end)
			h.Commit(end)
		},
	}
}

// status wraps next: a status update that confirms a transaction's end
// ends its span.
func (s *txnSpans) status(next func(received, confirmed pglogrepl.LSN)) func(received, confirmed pglogrepl.LSN) {
	return func(received, confirmed pglogrepl.LSN) {
		s.confirm(confirmed)
		if next != nil {
			next(received, confirmed)
		}
	}
}

func (s *txnSpans) emit(ev *outbox.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		start := ev.ReceivedAt
		if start.IsZero() {
			start = time.Now()
		}
		_, s.cur = s.tracer.Start(context.Background(), spanName, trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithTimestamp(start), trace.WithAttributes(
				attribute.Int64("walpost.xid", int64(ev.XID)),
				attribute.String("walpost.commit_lsn", ev.CommitLSN.String()),
				attribute.String("walpost.commit_time", ev.CommitTime.UTC().Format(time.RFC3339Nano))))
		s.n = 0
	}
	s.n++
	if sc, ok := rowSpanContext(ev, s.tracing); ok {
		s.cur.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String("walpost.outbox_id", ev.ID)}})
	}
}

func (s *txnSpans) commit(end pglogrepl.LSN) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return // a transaction without outbox events
	}
	s.cur.SetAttributes(attribute.Int("walpost.events", s.n), attribute.String("walpost.end_lsn", end.String()))
	s.pending = append(s.pending, pendingSpan{end, s.cur})
	s.cur = nil
}

func (s *txnSpans) confirm(confirmed pglogrepl.LSN) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := 0
	for ; i < len(s.pending) && s.pending[i].end <= confirmed; i++ {
		s.pending[i].span.End()
	}
	s.pending = s.pending[i:]
}

// close ends the spans the session leaves unconfirmed, marked so.
func (s *txnSpans) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil {
		s.pending = append(s.pending, pendingSpan{0, s.cur})
		s.cur = nil
	}
	for _, p := range s.pending {
		p.span.SetAttributes(attribute.Bool("walpost.confirmed", false))
		p.span.End()
	}
	s.pending = nil
}

// rowSpanContext is the span context the row carries: its tracing column
// (debezium profile), or the traceparent and tracestate of its headers
// column (walpost profile); a malformed one is none.
func rowSpanContext(ev *outbox.Event, tracing bool) (trace.SpanContext, bool) {
	var tc kafka.TraceContext
	switch {
	case tracing && ev.Placed != nil && ev.Placed.Trace != nil:
		tc, _ = kafka.ParseTraceContext(ev.Placed.Trace)
	case len(ev.Headers) > 0:
		var h struct {
			Traceparent string `json:"traceparent"`
			Tracestate  string `json:"tracestate"`
		}
		if json.Unmarshal(ev.Headers, &h) != nil || h.Traceparent == "" {
			return trace.SpanContext{}, false
		}
		tc, _ = kafka.CheckTraceContext(h.Traceparent, h.Tracestate)
	}
	if tc.Traceparent == "" {
		return trace.SpanContext{}, false
	}
	return spanContext(tc)
}

// spanContext converts a checked W3C trace context.
func spanContext(tc kafka.TraceContext) (trace.SpanContext, bool) {
	tid, err1 := trace.TraceIDFromHex(tc.Traceparent[3:35])
	sid, err2 := trace.SpanIDFromHex(tc.Traceparent[36:52])
	if err1 != nil || err2 != nil {
		return trace.SpanContext{}, false
	}
	var flags trace.TraceFlags
	if f, err := strconv.ParseUint(tc.Traceparent[53:55], 16, 8); err == nil && f&1 == 1 {
		flags = trace.FlagsSampled
	}
	cfg := trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags, Remote: true}
	if tc.Tracestate != "" {
		if ts, err := trace.ParseTraceState(tc.Tracestate); err == nil {
			cfg.TraceState = ts
		}
	}
	return trace.NewSpanContext(cfg), true
}
