package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

const traceparentB = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"

// TestDebeziumTracingColumn: with the debezium profile and
// mapping.tracing_column = tracingspancontext (Debezium's default field),
// a row whose column holds java.util.Properties text and one holding a
// plain traceparent arrive with traceparent (and tracestate) ahead of the
// id header; a NULL column gives the id header alone; a malformed value
// gives the record without a trace context, counted in
// walpost_trace_context_invalid_total and logged with the row's id.
func TestDebeziumTracingColumn(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	debeziumTable(t, f)
	mustExec(t, f.Pool, fmt.Sprintf(`ALTER TABLE %s ADD COLUMN tracingspancontext varchar(255)`, f.Table))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	types, topics := debeziumTopics(ctx, t, f)

	var addr string
	var p *proc
	if _, out, err := retryPort(t, func(port int) (string, error) {
		addr = fmt.Sprintf("127.0.0.1:%d", port)
		p = f.start("WALPOST_MAPPING_PROFILE=debezium", "WALPOST_MAPPING_TRACING_COLUMN=tracingspancontext", "WALPOST_HTTP_LISTEN="+addr)
		waitFor(t, 30*time.Second, "/readyz 200", func() bool { c, _ := readyz(addr); return c == 200 || p.exited() })
		if p.exited() {
			return tail(p.log, 30), fmt.Errorf("walpost exited: %v", p.err)
		}
		return "", nil
	}); err != nil {
		t.Fatalf("walpost with http.listen %s: %v\n%s", addr, err, out)
	}

	rows := []struct {
		agg   string
		trace any // the column's value; nil is NULL
		want  []string
	}{
		{"props", "#Wed Dec 02 10:00:00 UTC 2026\ntraceparent=" + traceparentA + "\ntracestate=" + tracestateA + "\n",
			[]string{"traceparent=" + traceparentA, "tracestate=" + tracestateA}},
		{"plain", traceparentB, []string{"traceparent=" + traceparentB}},
		{"null", nil, nil},
		{"malformed", "traceparent=00-XYZ", nil},
	}
	ids := map[string]string{} // id → aggregateid
	for _, r := range rows {
		var id string
		if err := f.Pool.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %s (aggregatetype, aggregateid, type, payload, tracingspancontext)
			VALUES ($1, $2, 'Created', '{}', $3) RETURNING id::text`, f.Table), types[0], r.agg, r.trace).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[id] = r.agg
	}
	got := map[string]string{} // aggregateid → headers
	f.read(t, 60*time.Second, 2*time.Second, func(r *kgo.Record) {
		var hs []string
		for _, h := range r.Headers {
			hs = append(hs, h.Key+"="+string(h.Value))
		}
		got[string(r.Key)] = strings.Join(hs, " ")
	}, func() bool { return len(got) == len(rows) }, kgo.ConsumeTopics(topics[0]))
	var malformedID string
	for id, agg := range ids {
		var want []string
		for _, r := range rows {
			if r.agg == agg {
				want = append(r.want, "id="+id)
			}
		}
		if agg == "malformed" {
			malformedID = id
		}
		if got[agg] != strings.Join(want, " ") {
			t.Errorf("row %s (%s): headers %q, want %q", id, agg, got[agg], strings.Join(want, " "))
		}
	}
	m := scrape(t, addr, "walpost_trace_context_invalid_total")
	if m["walpost_trace_context_invalid_total"] != 1 {
		t.Errorf("walpost_trace_context_invalid_total = %v, want 1", m)
	}
	if b, _ := os.ReadFile(p.log); !strings.Contains(string(b), "malformed trace context") || !strings.Contains(string(b), "id="+malformedID) {
		t.Errorf("no log line naming the malformed trace context of id %s:\n%s", malformedID, tailOwn(p.log, 30))
	}
}
