package kafka_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/sink/kafka"
)

const (
	tp    = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	tpV1  = "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-future"
	state = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
)

// TestParseTraceContext: both forms of the tracing column, and what a
// malformed one gives.
func TestParseTraceContext(t *testing.T) {
	cases := []struct {
		name, in   string
		parent, st string
		invalid    bool
	}{
		{"empty", "", "", "", false},
		{"blank", " \n", "", "", false},
		{"plain", tp, tp, "", false},
		{"plain with a newline after", tp + "\n", tp, "", false},
		{"plain later version", tpV1, "00" + tpV1[2:55], "", false},
		// java.util.Properties text, as Debezium's tracing reads the column.
		{"properties", "traceparent=" + tp + "\n", tp, "", false},
		{"properties with tracestate", "#Fri Dec 02 10:00:00 UTC 2026\ntraceparent=" + tp + "\ntracestate=" + state + "\n", tp, state, false},
		{"properties colon and spaces", "  traceparent : " + tp + "\r\ntracestate " + state, tp, state, false},
		{"properties continuation", "traceparent=" + tp[:20] + "\\\n    " + tp[20:], tp, "", false},
		{"properties escapes", "trace\\u0070arent=" + strings.Replace(tp, "-", "\\-", 1), tp, "", false},
		{"properties later key wins", "traceparent=00-11111111111111111111111111111111-2222222222222222-00\ntraceparent=" + tp, tp, "", false},
		{"properties other keys", "baggage=a=b\ntraceparent=" + tp + "\nuber-trace-id=x", tp, "", false},
		{"tracestate spaces dropped", "traceparent=" + tp + "\ntracestate=congo=t61rcWkgMzE , rojo=00f067aa0ba902b7,", tp, state, false},
		{"tracestate multi-tenant key", "traceparent=" + tp + "\ntracestate=fw529a3039@dt=x", tp, "fw529a3039@dt=x", false},

		{"properties without traceparent", "tracestate=" + state, "", "", true},
		{"comment only", "#traceparent=" + tp, "", "", true},
		{"upper-case hex", strings.ToUpper(tp), "", "", true},
		{"all-zero trace id", "00-00000000000000000000000000000000-b7ad6b7169203331-01", "", "", true},
		{"all-zero parent id", "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", "", "", true},
		{"version ff", "ff" + tp[2:], "", "", true},
		{"version 00 too long", tp + "-x", "", "", true},
		{"short", tp[:54], "", "", true},
		{"bad flags", tp[:53] + "zz", "", "", true},
		{"jaeger id", "uber-trace-id=abc:def:0:1", "", "", true},
		{"malformed \\u", "traceparent=\\u00zz" + tp, "", "", true},
		{"bad tracestate member", "traceparent=" + tp + "\ntracestate=Congo=x", tp, "", true},
		{"tracestate without =", "traceparent=" + tp + "\ntracestate=congo", tp, "", true},
		{"tracestate over 32 members", "traceparent=" + tp + "\ntracestate=" + strings.Repeat("a=b,", 33), tp, "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := kafka.ParseTraceContext([]byte(c.in))
			if c.invalid != (err != nil) {
				t.Fatalf("err = %v, want invalid %v", err, c.invalid)
			}
			if err != nil && !errors.Is(err, kafka.ErrInvalidTraceContext) {
				t.Errorf("err %v does not match ErrInvalidTraceContext", err)
			}
			if got.Traceparent != c.parent || got.Tracestate != c.st {
				t.Errorf("got %+v, want traceparent %q tracestate %q", got, c.parent, c.st)
			}
		})
	}
}

// TestDebeziumTraceHeaders: the tracing column's context leads the
// headers (as Debezium's router writes them before id); a malformed one
// is left out and reported, the record still built; without the column
// nothing changes.
func TestDebeziumTraceHeaders(t *testing.T) {
	layout := func(tracing bool) *kafka.Layout {
		return kafka.NewLayout(kafka.Layout{Debezium: true, KeyFormat: kafka.FormatString, ValueFormat: kafka.FormatString, Tracing: tracing},
			"outbox.event."+kafka.RoutedByValue)
	}
	l := layout(true)
	var reported []string
	l.OnInvalidTrace = func(ev *outbox.Event, err error) { reported = append(reported, ev.ID+": "+err.Error()) }
	ev := func(trace string) *outbox.Event {
		e := &outbox.Event{ID: "e1", IdempotencyKey: "e1", PartitionKey: "k", HasPartition: true, Topic: "order",
			Payload: []byte(`{}`), CommitTime: time.Unix(1, 0), Placed: &outbox.Placed{}}
		if trace != "" {
			e.Placed.Trace = []byte(trace)
		}
		return e
	}
	headers := func(trace string) string {
		r, err := kafka.BuildRecordWith(ev(trace), "d", l)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, h := range r.Headers {
			s = append(s, h.Key+"="+string(h.Value))
		}
		return strings.Join(s, " ")
	}
	for _, c := range []struct{ trace, want string }{
		{"traceparent=" + tp + "\ntracestate=" + state + "\n", "traceparent=" + tp + " tracestate=" + state + " id=e1"},
		{tp, "traceparent=" + tp + " id=e1"},
		{"", "id=e1"},
		{"not a trace context", "id=e1"},
		{"traceparent=" + tp + "\ntracestate=BAD", "traceparent=" + tp + " id=e1"},
	} {
		if got := headers(c.trace); got != c.want {
			t.Errorf("tracing column %q: headers %s, want %s", c.trace, got, c.want)
		}
	}
	if len(reported) != 2 || !strings.HasPrefix(reported[0], "e1: invalid trace context") {
		t.Errorf("reported %q, want the two malformed contexts with the event id", reported)
	}

	if r, err := kafka.BuildRecordWith(ev("traceparent="+tp), "d", layout(false)); err != nil || len(r.Headers) != 1 {
		t.Errorf("without mapping.tracing_column: headers %v, %v; want id only", r.Headers, err)
	}
}
