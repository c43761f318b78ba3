package writer

import (
	"context"
	"errors"
	"fmt"
)

// Header names of the W3C trace context (https://www.w3.org/TR/trace-context/)
// that WithTraceContext has the writer put into an event's headers.
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// ErrInvalidTraceContext is returned by WithTraceContext for a traceparent
// or tracestate that is not W3C trace context.
var ErrInvalidTraceContext = errors.New("invalid W3C trace context")

type traceKey struct{}

type traceContext struct{ parent, state string }

// WithTraceContext returns a copy of ctx that carries a W3C trace context,
// the traceparent ("00-<32 hex trace-id>-<16 hex parent-id>-<2 hex
// flags>") and tracestate (may be empty) of the application's current
// span. Every Insert, InsertBatch, InsertSQL and InsertBatchSQL given that
// context writes them into each event's headers column as the headers
// traceparent and tracestate, so walpost produces the record with them and
// a consumer continues the trace (docs/tracing.md). An event whose Headers
// already hold a traceparent keeps its own traceparent and tracestate.
//
// The package does not depend on OpenTelemetry: take the strings from the
// application's propagator, for example with OpenTelemetry's
//
//	carrier := propagation.MapCarrier{}
//	propagation.TraceContext{}.Inject(ctx, carrier)
//	ctx, err := writer.WithTraceContext(ctx, carrier["traceparent"], carrier["tracestate"])
//
// A malformed traceparent (a version other than 00-fe, ids not lower-case
// hex or all zero, version 00 with more than four fields) or a tracestate
// that is not printable ASCII of at most 512 bytes is an error matching
// ErrInvalidTraceContext, and ctx is returned as it was: the events are
// written without a trace context rather than refused. An empty
// traceparent returns ctx without a trace context and no error.
func WithTraceContext(ctx context.Context, traceparent, tracestate string) (context.Context, error) {
	if traceparent == "" {
		return ctx, nil
	}
	if reason := badTraceparent(traceparent); reason != "" {
		return ctx, fmt.Errorf("%w: traceparent %q: %s", ErrInvalidTraceContext, traceparent, reason)
	}
	if len(tracestate) > 512 {
		return ctx, fmt.Errorf("%w: tracestate longer than 512 bytes", ErrInvalidTraceContext)
	}
	for i := 0; i < len(tracestate); i++ {
		if c := tracestate[i]; c < 0x20 || c > 0x7e {
			return ctx, fmt.Errorf("%w: tracestate %q: not printable ASCII", ErrInvalidTraceContext, tracestate)
		}
	}
	return context.WithValue(ctx, traceKey{}, traceContext{traceparent, tracestate}), nil
}

// badTraceparent says why p is not a W3C traceparent, or "".
func badTraceparent(p string) string {
	const n = 55
	if len(p) < n || (len(p) > n && p[n] != '-') || p[2] != '-' || p[35] != '-' || p[52] != '-' {
		return "not version-traceid-parentid-flags (00-<32 hex>-<16 hex>-<2 hex>)"
	}
	hex := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
		return true
	}
	zero := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if s[i] != '0' {
				return false
			}
		}
		return true
	}
	switch v := p[:2]; {
	case !hex(v) || v == "ff":
		return "the version is not 00-fe in lower-case hex"
	case v == "00" && len(p) > n:
		return "version 00 has exactly four fields"
	case !hex(p[3:35]) || zero(p[3:35]):
		return "the trace-id is not 32 lower-case hex digits, not all zero"
	case !hex(p[36:52]) || zero(p[36:52]):
		return "the parent-id is not 16 lower-case hex digits, not all zero"
	case !hex(p[53:55]):
		return "the flags are not 2 lower-case hex digits"
	}
	return ""
}

// traceOf is ctx's trace context; nil when it has none.
func traceOf(ctx context.Context) *traceContext {
	if tc, ok := ctx.Value(traceKey{}).(traceContext); ok {
		return &tc
	}
	return nil
}

// headers returns h with the trace context added (a new map; h is not
// modified), or h as it is when tc is nil or h holds a traceparent
// already. A tracestate of h without a traceparent is replaced: it
// belongs to another trace.
func (tc *traceContext) headers(h map[string]string) map[string]string {
	if tc == nil {
		return h
	}
	if _, own := h[HeaderTraceparent]; own {
		return h
	}
	out := make(map[string]string, len(h)+2)
	for k, v := range h {
		out[k] = v
	}
	out[HeaderTraceparent] = tc.parent
	if tc.state != "" {
		out[HeaderTracestate] = tc.state
	} else {
		delete(out, HeaderTracestate)
	}
	return out
}
