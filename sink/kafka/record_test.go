package kafka_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/sink/kafka"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

const defaultTopic = "walpost.events"

// baseEvent is a fully populated outbox row as the stream decodes it.
func baseEvent() outbox.Event {
	return outbox.Event{
		ID:             "5f0c6c8e-2d3b-4c1a-9a57-0d5e1c8b7a11",
		IdempotencyKey: "order-42-created",
		Payload:        []byte(`{"id": 42, "lines": [{"sku": "A-1", "qty": 2}], "total": "19.99"}`),
		CreatedAt:      "2026-11-29 22:50:51.123456+00",
		XID:            771,
		CommitLSN:      0x16B3748,
		CommitTime:     time.Date(2026, 11, 29, 22, 50, 51, 130007000, time.UTC),
	}
}

type goldenHeader struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// goldenRecord is the part of a kgo.Record the contract fixes (DESIGN.md, Contracts).
type goldenRecord struct {
	Name      string         `json:"name"`
	Topic     string         `json:"topic"`
	Key       string         `json:"key"`
	Value     *string        `json:"value"` // exact bytes; null for a nil value
	Headers   []goldenHeader `json:"headers"`
	Timestamp string         `json:"timestamp"` // RFC 3339, UTC
}

func toGolden(name string, r *kgo.Record) goldenRecord {
	g := goldenRecord{Name: name, Topic: r.Topic, Key: string(r.Key), Headers: []goldenHeader{},
		Timestamp: r.Timestamp.UTC().Format(time.RFC3339Nano)}
	if r.Value != nil {
		v := string(r.Value)
		g.Value = &v
	}
	for _, h := range r.Headers {
		g.Headers = append(g.Headers, goldenHeader{h.Key, string(h.Value)})
	}
	return g
}

// TestBuildRecordGolden pins the Kafka record envelope: topic, key, value
// bytes, header order and values, timestamp. Run with -update to rewrite
// testdata/record.golden after an intended change, and review the diff.
func TestBuildRecordGolden(t *testing.T) {
	cases := []struct {
		name string
		edit func(*outbox.Event)
	}{
		{"default topic, no event type, no headers", func(*outbox.Event) {}},
		{"row topic and event type", func(e *outbox.Event) {
			e.Topic = "orders"
			e.EventType = "OrderCreated"
		}},
		{"row headers sorted by key after the contract headers", func(e *outbox.Event) {
			e.EventType = "OrderCreated"
			e.Headers = []byte(`{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "a": "first", "Z": "upper", "tenant": "acme", "empty": ""}`)
		}},
		{"headers JSON null", func(e *outbox.Event) { e.Headers = []byte("null") }},
		{"headers empty object", func(e *outbox.Event) { e.Headers = []byte("{}") }},
		{"row header named like a contract header is appended, not replacing it", func(e *outbox.Event) {
			e.Headers = []byte(`{"idempotency_key": "from-row", "x": "y"}`)
		}},
		{"partition key does not show in the record", func(e *outbox.Event) {
			e.PartitionKey, e.HasPartition = "customer-7", true
		}},
		{"commit LSN above 4 GiB", func(e *outbox.Event) { e.CommitLSN = 0x1_0000_00A0 }},
		{"created_at +05:30", func(e *outbox.Event) { e.CreatedAt = "2026-11-30 04:20:51.123456+05:30" }},
		{"created_at -03 without fraction", func(e *outbox.Event) { e.CreatedAt = "2026-11-29 19:50:51-03" }},
		{"created_at not parseable is passed through", func(e *outbox.Event) { e.CreatedAt = "infinity" }},
		{"payload exactly as PostgreSQL rendered it, unicode and escapes kept", func(e *outbox.Event) {
			e.Payload = []byte(`{"note": "caf\u00e9 ☕", "nested": {"b": [1, 2.50, null]}, "s": "a\"b"}`)
		}},
		{"recovered by walpost recover: walpost_recovered after the row's headers", func(e *outbox.Event) {
			e.Recovered = true
			e.Headers = []byte(`{"tenant": "acme"}`)
		}},
		{"commit time with a zone is stored as the same instant", func(e *outbox.Event) {
			e.CommitTime = time.Date(2026, 11, 30, 4, 20, 51, 130007000, time.FixedZone("IST", 5*3600+1800))
		}},
	}
	var got []goldenRecord
	for _, c := range cases {
		ev := baseEvent()
		c.edit(&ev)
		r, err := kafka.BuildRecord(&ev, defaultTopic)
		if err != nil {
			t.Fatalf("%s: BuildRecord: %v", c.name, err)
		}
		if !r.Timestamp.Equal(ev.CommitTime) {
			t.Errorf("%s: Timestamp %s, want the commit time %s", c.name, r.Timestamp, ev.CommitTime)
		}
		if !bytes.Equal(r.Value, ev.Payload) {
			t.Errorf("%s: Value %q, want the payload %q", c.name, r.Value, ev.Payload)
		}
		got = append(got, toGolden(c.name, r))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(got); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "record.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./sink -run TestBuildRecordGolden -update)", err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("record envelope differs from %s (run with -update if intended):\n%s", path, lineDiff(string(want), buf.String()))
	}
}

// lineDiff shows the first differing lines of want and got.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < max(len(w), len(g)) && b.Len() < 4000; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			b.WriteString("line " + strconv.Itoa(i+1) + ":\n  want " + wl + "\n  got  " + gl + "\n")
		}
	}
	return b.String()
}

// The contract, stated once more without the golden file, so a careless
// -update cannot bless a broken envelope.
func TestBuildRecordContract(t *testing.T) {
	ev := baseEvent()
	ev.Topic = "orders"
	ev.EventType = "OrderCreated"
	ev.Headers = []byte(`{"b": "2", "a": "1"}`)
	r, err := kafka.BuildRecord(&ev, defaultTopic)
	if err != nil {
		t.Fatal(err)
	}
	if r.Topic != "orders" || string(r.Key) != ev.IdempotencyKey || !r.Timestamp.Equal(ev.CommitTime) {
		t.Errorf("topic %q key %q timestamp %s", r.Topic, r.Key, r.Timestamp)
	}
	want := []goldenHeader{
		{"idempotency_key", "order-42-created"},
		{"outbox_id", "5f0c6c8e-2d3b-4c1a-9a57-0d5e1c8b7a11"},
		{"commit_lsn", "0/16B3748"},
		{"created_at", "2026-11-29T22:50:51.123456Z"},
		{"event_type", "OrderCreated"},
		{"a", "1"},
		{"b", "2"},
	}
	got := toGolden("", r).Headers
	if len(got) != len(want) {
		t.Fatalf("headers %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("header %d = %v, want %v", i, got[i], want[i])
		}
	}
	ev.Topic = ""
	if r, _ := kafka.BuildRecord(&ev, defaultTopic); r.Topic != defaultTopic {
		t.Errorf("no row topic: topic %q, want %q", r.Topic, defaultTopic)
	}
	if got := pglogrepl.LSN(0x16B3748).String(); got != "0/16B3748" {
		t.Errorf("LSN format %q", got)
	}
}

func TestBuildRecordErrors(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*outbox.Event)
		want    error
		mention string
	}{
		{"empty idempotency key", func(e *outbox.Event) { e.IdempotencyKey = "" }, kafka.ErrEmptyKey, ""},
		{"headers an array", func(e *outbox.Event) { e.Headers = []byte(`["a", "b"]`) }, kafka.ErrInvalidHeaders, ""},
		{"headers a string", func(e *outbox.Event) { e.Headers = []byte(`"a"`) }, kafka.ErrInvalidHeaders, ""},
		{"headers a number", func(e *outbox.Event) { e.Headers = []byte(`42`) }, kafka.ErrInvalidHeaders, ""},
		{"headers a boolean", func(e *outbox.Event) { e.Headers = []byte(`true`) }, kafka.ErrInvalidHeaders, ""},
		{"headers not JSON", func(e *outbox.Event) { e.Headers = []byte(`{"a": `) }, kafka.ErrInvalidHeaders, ""},
		{"header value a number", func(e *outbox.Event) { e.Headers = []byte(`{"ok": "x", "retries": 3}`) }, kafka.ErrInvalidHeaders, `"retries"`},
		{"header value null", func(e *outbox.Event) { e.Headers = []byte(`{"a": null}`) }, kafka.ErrInvalidHeaders, `"a"`},
		{"header value an object", func(e *outbox.Event) { e.Headers = []byte(`{"a": {"b": "c"}}`) }, kafka.ErrInvalidHeaders, `"a"`},
		{"header value an array", func(e *outbox.Event) { e.Headers = []byte(`{"a": ["x"]}`) }, kafka.ErrInvalidHeaders, `"a"`},
		{"header value a boolean", func(e *outbox.Event) { e.Headers = []byte(`{"a": false}`) }, kafka.ErrInvalidHeaders, `"a"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev := baseEvent()
			tc.edit(&ev)
			r, err := kafka.BuildRecord(&ev, defaultTopic)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if r != nil {
				t.Errorf("record %+v returned with the error", r)
			}
			if tc.mention != "" && !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("err = %q, want it to name %s", err, tc.mention)
			}
		})
	}
}

func TestRFC3339(t *testing.T) {
	tests := []struct {
		pg, want string
	}{
		{"2026-11-29 22:50:51.123456+00", "2026-11-29T22:50:51.123456Z"},
		{"2026-11-29 22:50:51+00", "2026-11-29T22:50:51Z"},
		{"2026-11-29 22:50:51.1+00", "2026-11-29T22:50:51.1Z"},
		{"2026-11-29 22:50:51.120000+00", "2026-11-29T22:50:51.12Z"},
		{"2026-11-30 04:20:51.123456+05:30", "2026-11-30T04:20:51.123456+05:30"},
		{"2026-11-29 19:50:51.123456-03", "2026-11-29T19:50:51.123456-03:00"},
		{"2026-11-29 13:20:51.5-09:30", "2026-11-29T13:20:51.5-09:30"},
		{"2026-11-30 11:50:51+13", "2026-11-30T11:50:51+13:00"},
		{"2026-11-29 22:50:51.123456+00:00:00", "2026-11-29T22:50:51.123456Z"},
		// Not parseable: passed through unchanged.
		{"infinity", "infinity"},
		{"-infinity", "-infinity"},
		{"", ""},
		{"2026-11-29T22:50:51Z", "2026-11-29T22:50:51Z"},
		{"Sun Nov 29 22:50:51.123456 2026 UTC", "Sun Nov 29 22:50:51.123456 2026 UTC"}, // DateStyle Postgres
	}
	for _, tc := range tests {
		t.Run(tc.pg, func(t *testing.T) {
			got := kafka.RFC3339(tc.pg)
			if got != tc.want {
				t.Fatalf("RFC3339(%q) = %q, want %q", tc.pg, got, tc.want)
			}
		})
	}
	// The conversion keeps the instant.
	instant := time.Date(2026, 11, 29, 22, 50, 51, 123456000, time.UTC)
	for _, pg := range []string{"2026-11-29 22:50:51.123456+00", "2026-11-30 04:20:51.123456+05:30", "2026-11-29 19:50:51.123456-03"} {
		got, err := time.Parse(time.RFC3339Nano, kafka.RFC3339(pg))
		if err != nil || !got.Equal(instant) {
			t.Errorf("RFC3339(%q) = %s (%v), want the instant %s", pg, got, err, instant)
		}
	}
}
