package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDebeziumTraceHeaders runs the real Debezium (Kafka Connect
// standalone, the Outbox Event Router under its defaults, whose
// tracing.span.context.field is tracingspancontext) with OpenTelemetry's
// SDK on the classpath (scripts/debezium.sh resolves it into
// .stack/debezium/otel; autoconfigured by system properties, no Java
// agent) beside walpost with mapping.tracing_column = tracingspancontext,
// on the same rows, and compares each record by its id header
// (docs/tracing.md, "Compared with Debezium"). Two Connect workers run,
// one per SDK set-up users have:
//
//   - otel.traces.exporter=none: the SDK hands out no-op spans, and
//     Debezium's headers carry the row's context unchanged. Every record
//     is compared byte for byte as TestDebeziumBytes compares them, trace
//     headers included, but for a plain traceparent value, which Debezium
//     (reading the column as java.util.Properties) does not find:
//     walpost sends it, Debezium nothing;
//   - otel.traces.exporter=logging (a recording SDK): Debezium's
//     traceparent names the span its tracing started. Records are
//     compared byte for byte without the trace headers; those have the
//     same names in the same order, the same tracestate, and a
//     traceparent equal but for its parent-id (Debezium's span, random;
//     walpost's the row's own). A plain value and a malformed one give
//     Debezium a root span of a new trace, walpost the row's traceparent
//     and nothing.
//
// On both, a NULL column gives the id header alone, and a baggage key in
// the column gives no baggage header (Debezium injects from its span's
// context, which holds no baggage).
//
// WALPOST_DEBEZIUM=1 (make test-debezium) runs it, otherwise it skips.
func TestDebeziumTraceHeaders(t *testing.T) {
	if os.Getenv("WALPOST_DEBEZIUM") != "1" {
		t.Skip("WALPOST_DEBEZIUM=1 (make test-debezium) runs Kafka Connect with Debezium against walpost")
	}
	f := newFixture(t, fixtureOpts{})
	debeziumTable(t, f)
	mustExec(t, f.Pool, fmt.Sprintf(`ALTER TABLE %s ADD COLUMN tracingspancontext varchar(255)`, f.Table))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	libs := debeziumLibs(t)
	otel := filepath.Join(filepath.Dir(libs), "otel")

	typ := "Traced_" + strings.TrimPrefix(f.Topic, "topic_")
	setups := []struct{ exporter, topic string }{
		{"none", "none.outbox.event." + typ},
		{"logging", "logging.outbox.event." + typ},
	}
	wpTopic := "wp.outbox.event." + typ
	topics := []string{wpTopic}
	for _, s := range setups {
		topics = append(topics, s.topic)
	}
	resp, err := f.Admin.CreateTopics(ctx, 3, -1, nil, topics...)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp {
		if r.Err != nil {
			t.Fatalf("create topic %s: %v", r.Topic, r.Err)
		}
	}
	t.Cleanup(func() { _, _ = f.Admin.DeleteTopics(context.Background(), topics...) })
	for _, s := range setups {
		slot := f.Slot + "_dbz_" + s.exporter
		mustExec(t, f.Pool, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot)
		t.Cleanup(func() { dropSlot(f, slot) })
	}

	p := f.start("WALPOST_MAPPING_PROFILE=debezium", "WALPOST_MAPPING_TRACING_COLUMN=tracingspancontext",
		"WALPOST_MAPPING_TOPIC_TEMPLATE=wp.outbox.event.${routedByValue}")
	if !p.waitLog("streaming", 60*time.Second) {
		t.Fatalf("walpost did not start streaming:\n%s", tail(p.log, 40))
	}

	const (
		sampled   = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
		state     = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
	)
	rows := []struct {
		agg   string
		trace any // the column; nil is NULL
	}{
		// java.util.Properties text as Properties.store writes it: a date
		// comment, then key=value lines.
		{"props-state", "#Wed Dec 02 10:00:00 UTC 2026\ntracestate=" + state + "\ntraceparent=" + sampled + "\n"},
		{"props-unsampled", "traceparent=" + unsampled + "\n"},
		{"props-baggage", "traceparent=" + sampled + "\nbaggage=userId=alice\n"},
		{"plain", sampled},
		{"null", nil},
		{"malformed", "traceparent=00-XYZ\n"},
	}
	ids := map[string]string{} // id → aggregateid
	for _, r := range rows {
		var id string
		if err := f.Pool.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %s (aggregatetype, aggregateid, type, payload, tracingspancontext)
			VALUES ($1, $2, 'Created', '{"a": 1}', $3) RETURNING id::text`, f.Table), typ, r.agg, r.trace).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[id] = r.agg
	}

	var restPorts []int
	var logs []string
	for _, s := range setups {
		workDir := t.TempDir()
		stop, restPort := startConnect(t, libs, workDir,
			[]dbzConnector{{profile: converterProfiles[0], name: "trace_" + s.exporter, slot: f.Slot + "_dbz_" + s.exporter, table: f.Table,
				publication: f.Publication, extra: [][2]string{{"transforms.outbox.route.topic.replacement", s.exporter + ".outbox.event.${routedByValue}"}}}},
			[]string{"-Dotel.java.global-autoconfigure.enabled=true", "-Dotel.traces.exporter=" + s.exporter,
				"-Dotel.metrics.exporter=none", "-Dotel.logs.exporter=none", "-Dotel.service.name=walpost-compare"},
			otel)
		defer stop()
		restPorts = append(restPorts, restPort)
		logs = append(logs, filepath.Join(workDir, "connect.log"))
	}

	got := map[string]map[string]*kgo.Record{} // topic → aggregateid → record
	for _, tp := range topics {
		got[tp] = map[string]*kgo.Record{}
	}
	complete := func() bool {
		for _, tp := range topics {
			if len(got[tp]) != len(rows) {
				return false
			}
		}
		return true
	}
	f.read(t, 3*time.Minute, 3*time.Second, func(r *kgo.Record) {
		for _, h := range r.Headers {
			if h.Key == "id" {
				if agg, ok := ids[string(h.Value)]; ok {
					got[r.Topic][agg] = r
				}
			}
		}
	}, func() bool {
		for i, port := range restPorts {
			if msg := connectFailure(port); msg != "" {
				t.Fatalf("%s\nKafka Connect log (tail):\n%s", msg, tail(logs[i], 60))
			}
		}
		return complete()
	}, kgo.ConsumeTopics(topics...))
	if !complete() {
		for _, tp := range topics {
			t.Logf("%s: %d records", tp, len(got[tp]))
		}
		t.Fatalf("not every side sent its %d records\nKafka Connect log (tail):\n%s", len(rows), tail(logs[0], 60))
	}

	header := func(r *kgo.Record, name string) (string, bool) {
		for _, h := range r.Headers {
			if h.Key == name {
				return string(h.Value), true
			}
		}
		return "", false
	}
	names := func(r *kgo.Record) string {
		var out []string
		for _, h := range r.Headers {
			if !strings.HasPrefix(h.Key, "__debezium.context.") {
				out = append(out, h.Key)
			}
		}
		return strings.Join(out, ",")
	}
	// untraced is r without the trace headers, for recordDiff.
	untraced := func(r *kgo.Record) *kgo.Record {
		c := *r
		c.Headers = nil
		for _, h := range r.Headers {
			if h.Key != "traceparent" && h.Key != "tracestate" {
				c.Headers = append(c.Headers, h)
			}
		}
		return &c
	}
	// fields splits a traceparent: version, trace-id, parent-id, flags.
	fields := func(tp string) []string { return append(strings.Split(tp, "-"), "", "", "", "")[:4] }
	for _, s := range setups {
		for _, r := range rows {
			d, w := got[s.topic][r.agg], got[wpTopic][r.agg]
			// Each side has its own topic: recordDiff compares the rest.
			wc := *w
			wc.Topic = "wp." + d.Topic
			dtp, dok := header(d, "traceparent")
			wtp, wok := header(w, "traceparent")
			dts, _ := header(d, "tracestate")
			wts, _ := header(w, "tracestate")
			t.Logf("exporter %s, %s: Debezium %s traceparent %q tracestate %q; walpost %s traceparent %q tracestate %q",
				s.exporter, r.agg, names(d), dtp, dts, names(w), wtp, wts)
			if _, ok := header(d, "baggage"); ok {
				t.Errorf("exporter %s, %s: Debezium sent a baggage header", s.exporter, r.agg)
			}
			if diff := recordDiff(untraced(d), untraced(&wc), "wp."); diff != "" {
				t.Errorf("exporter %s, %s: %s", s.exporter, r.agg, diff)
			}
			full := recordDiff(d, &wc, "wp.")
			df, wf := fields(dtp), fields(wtp)
			switch {
			case r.agg == "null" || (r.agg == "malformed" && s.exporter == "none"):
				if full != "" || wok {
					t.Errorf("exporter %s, %s: %s (walpost traceparent %v); want the same record, no trace headers", s.exporter, r.agg, full, wok)
				}
			case r.agg == "plain" && s.exporter == "none":
				if dok || wtp != sampled {
					t.Errorf("exporter %s, plain: Debezium traceparent %q, walpost %q; want none from Debezium, the row's from walpost", s.exporter, dtp, wtp)
				}
			case r.agg == "plain" || r.agg == "malformed":
				if !dok || df[1] == fields(sampled)[1] || (r.agg == "plain") != (wtp == sampled) || (r.agg == "malformed") == wok {
					t.Errorf("exporter %s, %s: Debezium traceparent %q, walpost %q; want a new trace from Debezium, the row's (plain) or none (malformed) from walpost", s.exporter, r.agg, dtp, wtp)
				}
			case s.exporter == "none":
				if full != "" {
					t.Errorf("exporter %s, %s: %s", s.exporter, r.agg, full)
				}
			default:
				switch {
				case names(d) != names(w):
					t.Errorf("exporter %s, %s: header names %s, Debezium's %s", s.exporter, r.agg, names(w), names(d))
				case df[0] != wf[0] || df[1] != wf[1] || df[3] != wf[3]:
					t.Errorf("exporter %s, %s: traceparent %q, Debezium's %q: want the same version, trace-id and flags", s.exporter, r.agg, wtp, dtp)
				case df[2] == wf[2]:
					t.Errorf("exporter %s, %s: Debezium's traceparent %q has the row's parent-id, not its own span's", s.exporter, r.agg, dtp)
				case dts != wts:
					t.Errorf("exporter %s, %s: tracestate %q, Debezium's %q", s.exporter, r.agg, wts, dts)
				}
			}
		}
	}
}
