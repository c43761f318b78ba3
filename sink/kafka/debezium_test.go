package kafka_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// TestAppendJacksonString: the escapes of Jackson's default JSON string
// writer (Kafka Connect's JsonConverter), not encoding/json's.
func TestAppendJacksonString(t *testing.T) {
	cases := []struct{ in, want string }{
		{``, `""`},
		{`plain`, `"plain"`},
		{`{"a": 1}`, `"{\"a\": 1}"`},
		{`back\slash`, `"back\\slash"`},
		{"<b>&amp;</b>", `"<b>&amp;</b>"`},                   // encoding/json: \u003c \u003e \u0026
		{"line\u2028para\u2029", "\"line\u2028para\u2029\""}, // encoding/json: \u2028 \u2029
		{"café ☕ 𝄞😀", `"café ☕ \uD834\uDD1E\uD83D\uDE00"`},   // beyond U+FFFF: UTF-16 surrogates, upper-case hex
		{"\b\t\n\f\r", `"\b\t\n\f\r"`},
		{"\x00\x01\x1f\x7f", `"\u0000\u0001\u001F` + "\x7f" + `"`}, // upper-case hex; DEL raw
		{"bad\xffutf8", "\"bad\uFFFDutf8\""},
	}
	for _, c := range cases {
		if got := string(kafka.AppendJacksonString(nil, []byte(c.in))); got != c.want {
			t.Errorf("AppendJacksonString(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}

func TestConnectType(t *testing.T) {
	cases := []struct {
		typ     string
		notNull bool
		want    string
		number  bool
	}{
		{"varchar", true, `{"type":"string","optional":false}`, false},
		{"text", false, `{"type":"string","optional":true}`, false},
		{"uuid", true, `{"type":"string","optional":false,"name":"io.debezium.data.Uuid","version":1}`, false},
		{"jsonb", false, `{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1}`, false},
		{"int8", true, `{"type":"int64","optional":false}`, true},
		{"bytea", true, `{"type":"bytes","optional":false}`, false},
	}
	for _, c := range cases {
		got, err := kafka.ConnectType(c.typ, c.notNull)
		if err != nil || got.Schema != c.want || got.Number != c.number || got.Binary != (c.typ == "bytea") {
			t.Errorf("ConnectType(%s, %v) = %+v, %v; want %s number %v", c.typ, c.notNull, got, err, c.want, c.number)
		}
	}
	if _, err := kafka.ConnectType("xml", true); err == nil {
		t.Error("ConnectType(xml): no error, want one (the json formats do not reproduce xml)")
	}
}

// debeziumLayout is the debezium profile's layout with Debezium's
// default topic template, the key and value formats and the header names
// of mapping.header_columns (what kafkaconf.LayoutFrom makes of the
// profile's mapping: kafkaconf's TestLayoutFrom).
func debeziumLayout(keyFormat, valueFormat string, headerNames ...string) *kafka.Layout {
	return kafka.NewLayout(kafka.Layout{Debezium: true, KeyFormat: keyFormat, ValueFormat: valueFormat, HeaderNames: headerNames},
		"outbox.event."+kafka.RoutedByValue)
}

// debeziumEvent is a row of Debezium's outbox table as the stream decodes
// it under the debezium profile: the id in ID and IdempotencyKey, the
// aggregateid in PartitionKey, the aggregatetype in Topic.
func debeziumEvent() outbox.Event {
	return outbox.Event{
		ID:             "5f0c6c8e-2d3b-4c1a-9a57-0d5e1c8b7a11",
		IdempotencyKey: "5f0c6c8e-2d3b-4c1a-9a57-0d5e1c8b7a11",
		PartitionKey:   "42",
		HasPartition:   true,
		Topic:          "Order",
		Payload:        []byte(`{"id": 42, "lines": [{"sku": "A-1", "qty": 2}], "total": "19.99"}`),
		CommitLSN:      0x16B3748,
		CommitTime:     time.Date(2026, 11, 29, 22, 50, 51, 130007000, time.UTC),
	}
}

type debeziumGoldenHeader struct {
	Key   string  `json:"key"`
	Value *string `json:"value"` // null for a null header
}

type debeziumGolden struct {
	Name      string                 `json:"name"`
	Topic     string                 `json:"topic"`
	Key       string                 `json:"key"`
	Partition int                    `json:"partition_of_12"` // murmur2 of the key bytes, as the Java client
	Value     string                 `json:"value"`
	Headers   []debeziumGoldenHeader `json:"headers"`
	Timestamp string                 `json:"timestamp"`
}

// TestDebeziumRecordGolden pins the bytes of the debezium profile's
// record for each converter profile (mapping.key_format and
// mapping.value_format: string, json, json_schema): topic, key, the
// partition the key bytes give, value, headers, timestamp. Run with
// -update to rewrite testdata/debezium.golden, and review the diff.
func TestDebeziumRecordGolden(t *testing.T) {
	rows := []struct {
		name string
		edit func(*outbox.Event)
	}{
		{"debezium defaults", func(*outbox.Event) {}},
		{"unicode, <>& and escapes in key and payload", func(e *outbox.Event) {
			e.PartitionKey = `a"b\c<>&` + "\u2028é"
			e.Payload = []byte(`{"html": "<b>&amp;</b>", "note": "caf\u00e9 ☕", "q": "a\"b", "nl": "x\ny", "sep": "` + "\u2028" + `"}`)
		}},
		{"nested JSON", func(e *outbox.Event) {
			e.Payload = []byte(`{"a": {"b": [1, 2.50, null, {"c": true}]}, "e": []}`)
		}},
		{"another aggregate type", func(e *outbox.Event) { e.Topic = "Customer"; e.PartitionKey = "7" }},
		{"header columns and the timestamp column", func(e *outbox.Event) {
			e.Placed = &outbox.Placed{HeaderValues: [][]byte{[]byte("OrderCreated"), nil},
				Timestamp: time.Date(2026, 11, 29, 22, 50, 0, 0, time.UTC)}
		}},
		{"replayed from the poison table", func(e *outbox.Event) { e.Replayed = true }},
	}
	types := map[string][2]kafka.ColumnType{}
	for _, f := range []string{"varchar", "jsonb"} {
		c, err := kafka.ConnectType(f, f == "varchar") // Debezium's table: aggregateid varchar NOT NULL, payload jsonb
		if err != nil {
			t.Fatal(err)
		}
		types[f] = [2]kafka.ColumnType{c}
	}
	part := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	got := map[string][]debeziumGolden{}
	for _, format := range []string{kafka.FormatString, kafka.FormatJSON, kafka.FormatJSONSchema} {
		l := debeziumLayout(format, format, "eventType", "tenant")
		l.KeyType, l.ValueType = types["varchar"][0], types["jsonb"][0]
		for _, row := range rows {
			ev := debeziumEvent()
			row.edit(&ev)
			r, err := kafka.BuildRecordWith(&ev, defaultTopic, l)
			if err != nil {
				t.Fatalf("%s %s: %v", format, row.name, err)
			}
			g := debeziumGolden{Name: row.name, Topic: r.Topic, Key: string(r.Key), Value: string(r.Value),
				Partition: part.Partition(&kgo.Record{Key: r.Key}, 12), Headers: []debeziumGoldenHeader{},
				Timestamp: r.Timestamp.UTC().Format(time.RFC3339Nano)}
			for _, h := range r.Headers {
				var v *string
				if h.Value != nil {
					s := string(h.Value)
					v = &s
				}
				g.Headers = append(g.Headers, debeziumGoldenHeader{h.Key, v})
			}
			got[format] = append(got[format], g)
			// The JSON formats are JSON, and carry the row's text.
			if format != kafka.FormatString {
				var key, value any
				if err := json.Unmarshal(r.Key, &key); err != nil {
					t.Errorf("%s %s: key %s is not JSON: %v", format, row.name, r.Key, err)
				}
				if err := json.Unmarshal(r.Value, &value); err != nil {
					t.Errorf("%s %s: value %s is not JSON: %v", format, row.name, r.Value, err)
				}
				if format == kafka.FormatJSONSchema {
					key, value = key.(map[string]any)["payload"], value.(map[string]any)["payload"]
				}
				if key != ev.PartitionKey || value != string(ev.Payload) {
					t.Errorf("%s %s: key %v, value %v decode to other text than the row's %q, %q", format, row.name, key, value, ev.PartitionKey, ev.Payload)
				}
			}
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(got); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "debezium.golden")
	if *update {
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./sink/kafka -run TestDebeziumRecordGolden -update)", err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("debezium record differs from %s (run with -update if intended):\n%s", path, lineDiff(string(want), buf.String()))
	}
}

// TestDebeziumRecordContract states the debezium profile's record without
// the golden file.
func TestDebeziumRecordContract(t *testing.T) {
	l := debeziumLayout(kafka.FormatString, kafka.FormatString)
	ev := debeziumEvent()
	r, err := kafka.BuildRecordWith(&ev, defaultTopic, l)
	if err != nil {
		t.Fatal(err)
	}
	if r.Topic != "outbox.event.Order" || string(r.Key) != "42" || !bytes.Equal(r.Value, ev.Payload) ||
		len(r.Headers) != 1 || r.Headers[0].Key != "id" || string(r.Headers[0].Value) != ev.ID || !r.Timestamp.Equal(ev.CommitTime) {
		t.Fatalf("record %s key %q value %q headers %v timestamp %s: want outbox.event.Order, key 42, the payload, header id only, the commit time",
			r.Topic, r.Key, r.Value, r.Headers, r.Timestamp)
	}
	ev.Topic = ""
	if r, _ := kafka.BuildRecordWith(&ev, defaultTopic, l); r.Topic != defaultTopic {
		t.Errorf("NULL aggregatetype: topic %q, want kafka.topic %q", r.Topic, defaultTopic)
	}
	// A layout of walpost's record keeps walpost's record, the template
	// applied.
	w := baseEvent()
	w.Topic = "orders"
	r, err = kafka.BuildRecordWith(&w, defaultTopic, kafka.NewLayout(kafka.Layout{}, "events."+kafka.RoutedByValue))
	if err != nil || r.Topic != "events.orders" || string(r.Key) != w.IdempotencyKey || r.Headers[0].Key != kafka.HeaderIdempotencyKey {
		t.Errorf("walpost profile with a template: %v, %+v; want topic events.orders and walpost's record", err, r)
	}
	if r, err = kafka.BuildRecordWith(&w, defaultTopic, kafka.NewLayout(kafka.Layout{}, kafka.RoutedByValue)); err != nil || r.Topic != "orders" {
		t.Errorf("identity template: %v, %+v; want topic orders", err, r)
	}
}

func TestDebeziumRecordErrors(t *testing.T) {
	l := debeziumLayout(kafka.FormatJSON, kafka.FormatJSON)
	cases := []struct {
		name string
		edit func(*outbox.Event)
		want error
	}{
		{"NULL aggregateid", func(e *outbox.Event) { e.PartitionKey, e.HasPartition = "", false }, kafka.ErrNullKey},
		{"no id", func(e *outbox.Event) { e.ID, e.IdempotencyKey = "", "" }, kafka.ErrEmptyID},
		{"aggregatetype not a topic name", func(e *outbox.Event) { e.Topic = "Order Lines/2" }, kafka.ErrInvalidTopic},
	}
	for _, c := range cases {
		ev := debeziumEvent()
		c.edit(&ev)
		if _, err := kafka.BuildRecordWith(&ev, defaultTopic, l); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// TestNullPayloadRecords: mapping.tombstone_on_empty_payload. Off, the
// walpost profile refuses a NULL payload (ErrNullPayload, quarantined)
// and the debezium profile writes the router's record of it, the null
// value through the value converter; on, a NULL payload is a tombstone
// with the usual key and headers in both profiles, and in the debezium
// profile also a payload blank after Java's trim, as the router tests
// it. A JSON null or a non-blank text stays a value.
func TestNullPayloadRecords(t *testing.T) {
	const jsonbSchema = `{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1}`
	cases := []struct {
		name, format string
		tombstones   bool
		payload      []byte
		want         []byte // nil: a tombstone
	}{
		{"string, off", kafka.FormatString, false, nil, nil},
		{"json, off", kafka.FormatJSON, false, nil, []byte("null")},
		{"json_schema, off", kafka.FormatJSONSchema, false, nil, []byte(`{"schema":` + jsonbSchema + `,"payload":null}`)},
		{"json, off, blank", kafka.FormatJSON, false, []byte(" \t"), []byte(`" \t"`)},
		{"string, on", kafka.FormatString, true, nil, nil},
		{"json, on", kafka.FormatJSON, true, nil, nil},
		{"json_schema, on", kafka.FormatJSONSchema, true, nil, nil},
		{"json_schema, on, blank", kafka.FormatJSONSchema, true, []byte(" \t\r\n\x00 "), nil},
		{"string, on, empty", kafka.FormatString, true, []byte{}, nil},
		{"json, on, JSON null", kafka.FormatJSON, true, []byte("null"), []byte(`"null"`)},
		{"string, on, text", kafka.FormatString, true, []byte(" x "), []byte(" x ")},
	}
	for _, c := range cases {
		l := debeziumLayout(kafka.FormatString, c.format, "eventType")
		l.Tombstones = c.tombstones
		l.ValueType = kafka.ColumnType{Schema: jsonbSchema}
		ev := debeziumEvent()
		ev.Payload = c.payload
		ev.Placed = &outbox.Placed{HeaderValues: [][]byte{[]byte("Deleted")}}
		r, err := kafka.BuildRecordWith(&ev, defaultTopic, l)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !bytes.Equal(r.Value, c.want) || (r.Value == nil) != (c.want == nil) {
			t.Errorf("%s: value %q (nil %v), want %q (nil %v)", c.name, r.Value, r.Value == nil, c.want, c.want == nil)
		}
		if r.Topic != "outbox.event.Order" || string(r.Key) != "42" || len(r.Headers) != 2 || r.Headers[0].Key != "id" ||
			string(r.Headers[0].Value) != ev.ID || r.Headers[1].Key != "eventType" || string(r.Headers[1].Value) != "Deleted" {
			t.Errorf("%s: record %s key %q headers %v: want outbox.event.Order, key 42, headers id and eventType", c.name, r.Topic, r.Key, r.Headers)
		}
	}

	// The walpost profile: off (its layout is nil), ErrNullPayload; on, a
	// tombstone with the contract's headers.
	for _, on := range []bool{false, true} {
		var l *kafka.Layout
		if on {
			l = kafka.NewLayout(kafka.Layout{Tombstones: true}, kafka.RoutedByValue)
		}
		ev := baseEvent()
		ev.Payload = nil
		r, err := kafka.BuildRecordWith(&ev, defaultTopic, l)
		if !on {
			if !errors.Is(err, kafka.ErrNullPayload) || !strings.Contains(err.Error(), "mapping.tombstone_on_empty_payload") {
				t.Errorf("walpost profile, off: %v, want ErrNullPayload naming mapping.tombstone_on_empty_payload", err)
			}
			continue
		}
		if err != nil || r.Value != nil || string(r.Key) != ev.IdempotencyKey || r.Topic != defaultTopic ||
			len(r.Headers) != 4 || r.Headers[0].Key != kafka.HeaderIdempotencyKey || string(r.Headers[0].Value) != ev.IdempotencyKey {
			t.Errorf("walpost profile, on: %v, %+v; want a tombstone keyed %q with the contract's headers", err, r, ev.IdempotencyKey)
		}
		ev.Payload = []byte{}
		if r, err := kafka.BuildRecordWith(&ev, defaultTopic, l); err != nil || r.Value == nil {
			t.Errorf("walpost profile, on, empty text payload: %v, value nil %v; want the empty value (only NULL is a tombstone)", err, r == nil || r.Value == nil)
		}
	}
}

// TestDebeziumProducePartitionsByKeyBytes: in the debezium profile the
// partition is murmur2 of the encoded key (what the Java client hashes
// behind JsonConverter), not of the aggregateid's text, and records keep
// their order per key.
func TestDebeziumProducePartitionsByKeyBytes(t *testing.T) {
	c := newCluster(t)
	l := kafka.NewLayout(kafka.Layout{Debezium: true, KeyFormat: kafka.FormatJSON, ValueFormat: kafka.FormatString}, testTopic)
	k := newKafka(t, c, kafka.Config{Layout: l})
	part := kgo.StickyKeyPartitioner(nil).ForTopic(testTopic)
	const n = 200
	var mu sync.Mutex
	parts := make([]int32, n)
	differ := 0
	for i := 0; i < n; i++ {
		ev := debeziumEvent()
		ev.PartitionKey = fmt.Sprintf("agg-%d", i%17)
		ev.Payload = []byte(fmt.Sprintf(`{"n": %d}`, i))
		k.Produce(&ev, sink.AckFunc(func(r sink.Result, err error) {
			if err != nil {
				t.Errorf("event %d: %v", i, err)
			}
			mu.Lock()
			parts[i] = r.Partition
			mu.Unlock()
		}))
		encoded := []byte(`"` + ev.PartitionKey + `"`)
		want := int32(part.Partition(&kgo.Record{Key: encoded}, 3))
		raw := int32(part.Partition(&kgo.Record{Key: []byte(ev.PartitionKey)}, 3))
		if want != raw {
			differ++
		}
		defer func() {
			if parts[i] != want {
				t.Errorf("event %d key %q: partition %d, murmur2 of the JSON key %s gives %d", i, ev.PartitionKey, parts[i], encoded, want)
			}
		}()
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := k.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if differ == 0 {
		t.Fatal("no key whose JSON encoding hashes elsewhere than its text: the test proves nothing")
	}
	got := consumeAll(t, c, testTopic, n)
	for p, rs := range got {
		last := map[string]int{}
		for _, r := range rs {
			var v struct{ N int }
			if err := json.Unmarshal(r.Value, &v); err != nil {
				t.Fatal(err)
			}
			if prev, ok := last[string(r.Key)]; ok && v.N < prev {
				t.Errorf("partition %d: key %s record %d after %d", p, r.Key, v.N, prev)
			}
			last[string(r.Key)] = v.N
			if len(r.Headers) != 1 || r.Headers[0].Key != "id" {
				t.Errorf("partition %d: headers %v, want only id", p, r.Headers)
			}
		}
	}
}
