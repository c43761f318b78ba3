package kafka_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linkedin/goavro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

const (
	avroOrder  = `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"long"},{"name":"note","type":["null","string"],"default":null}]}`
	jsonOrder  = `{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],"additionalProperties":false}`
	protoOrder = "syntax = \"proto3\";\npackage shop;\nmessage Order { int64 id = 1; string note = 2; }\n"
)

func newSchema(t *testing.T, reg *srfake.Registry, format, strategy string) *kafka.Schema {
	t.Helper()
	s, err := kafka.NewSchema(kafka.SchemaOptions{Format: format, URL: reg.URL(), SubjectStrategy: strategy,
		Timeout: 5 * time.Second, RefreshInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// header splits a framed value into its schema id and the rest.
func header(t *testing.T, b []byte) (int, []byte) {
	t.Helper()
	if len(b) < 5 || b[0] != 0 {
		t.Fatalf("value % x has no Confluent header (magic byte 0, 4-byte id)", b)
	}
	return int(binary.BigEndian.Uint32(b[1:5])), b[5:]
}

func TestSchemaFrames(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	reg.SeedSchema("orders-value", 1, 7, sr.Schema{Schema: avroOrder, Type: sr.TypeAvro})
	reg.SeedSchema("shop.Order", 1, 8, sr.Schema{Schema: jsonOrder, Type: sr.TypeJSON})
	reg.SeedSchema("orders-shop.Order", 1, 9, sr.Schema{Schema: protoOrder, Type: sr.TypeProtobuf})

	t.Run("avro", func(t *testing.T) {
		s := newSchema(t, reg, kafka.SchemaAvro, kafka.SubjectTopicName)
		out, err := s.Frame("orders", "", nil, []byte(`{"id": 42, "note": {"string": "gift"}}`))
		if err != nil {
			t.Fatal(err)
		}
		id, body := header(t, out)
		if id != 7 {
			t.Errorf("schema id %d, want 7", id)
		}
		codec, _ := goavro.NewCodec(avroOrder)
		native, _, err := codec.NativeFromBinary(body)
		if err != nil {
			t.Fatalf("the body is not the schema's Avro binary: %v", err)
		}
		m := native.(map[string]any)
		if m["id"] != int64(42) || m["note"].(map[string]any)["string"] != "gift" {
			t.Errorf("decoded %v", m)
		}
	})
	t.Run("json_schema", func(t *testing.T) {
		s := newSchema(t, reg, kafka.SchemaJSONSchema, kafka.SubjectRecordName)
		payload := []byte(`{"id": 1}`)
		out, err := s.Frame("orders", "shop.Order", nil, payload)
		if err != nil {
			t.Fatal(err)
		}
		if id, body := header(t, out); id != 8 || !bytes.Equal(body, payload) {
			t.Errorf("id %d body %q, want 8 and the payload", id, body)
		}
	})
	t.Run("protobuf", func(t *testing.T) {
		s := newSchema(t, reg, kafka.SchemaProtobuf, kafka.SubjectTopicRecordName)
		out, err := s.Frame("orders", "shop.Order", nil, []byte(`{"id": "5", "note": "x"}`))
		if err != nil {
			t.Fatal(err)
		}
		id, body := header(t, out)
		// Message index [0] is the single byte 0; then field 1 varint 5,
		// field 2 string "x".
		if want := []byte{0, 0x08, 5, 0x12, 1, 'x'}; id != 9 || !bytes.Equal(body, want) {
			t.Errorf("id %d body % x, want 9 and % x", id, body, want)
		}
	})
}

func TestSchemaRefuses(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	reg.SeedSchema("orders-value", 1, 7, sr.Schema{Schema: avroOrder, Type: sr.TypeAvro})
	reg.SeedSchema("people-value", 1, 8, sr.Schema{Schema: jsonOrder, Type: sr.TypeJSON})
	reg.SeedSchema("things-value", 1, 9, sr.Schema{Schema: protoOrder, Type: sr.TypeProtobuf})
	reg.SeedSchema("draft4-value", 1, 10, sr.Schema{Schema: `{"$schema":"http://json-schema.org/draft-04/schema#","type":"object"}`, Type: sr.TypeJSON})
	reg.SeedSchema("draft7-value", 1, 11, sr.Schema{Schema: `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"n":{"type":"integer","exclusiveMaximum":3}}}`, Type: sr.TypeJSON})
	avro := newSchema(t, reg, kafka.SchemaAvro, kafka.SubjectTopicName)
	js := newSchema(t, reg, kafka.SchemaJSONSchema, kafka.SubjectTopicName)
	pb := newSchema(t, reg, kafka.SchemaProtobuf, kafka.SubjectTopicName)
	byName := newSchema(t, reg, kafka.SchemaAvro, kafka.SubjectRecordName)

	for _, tc := range []struct {
		name    string
		s       *kafka.Schema
		topic   string
		payload string
		want    error
		class   string
	}{
		{"avro field of the wrong type", avro, "orders", `{"id": "forty-two", "note": null}`, kafka.ErrSchema, kafka.ClassSchema},
		{"avro field missing", avro, "orders", `{"note": null}`, kafka.ErrSchema, kafka.ClassSchema},
		{"avro not json", avro, "orders", `not json`, kafka.ErrSchema, kafka.ClassSchema},
		{"json schema breaks required", js, "people", `{"name": "x"}`, kafka.ErrSchema, kafka.ClassSchema},
		{"json schema data after the document", js, "people", `{"id": 1} {"id": 2}`, kafka.ErrSchema, kafka.ClassSchema},
		{"json schema not json", js, "people", `{"id": 1`, kafka.ErrSchema, kafka.ClassSchema},
		{"json schema draft-07 exclusiveMaximum", js, "draft7", `{"n": 3}`, kafka.ErrSchema, kafka.ClassSchema},
		{"json schema of a draft walpost does not validate", js, "draft4", `{}`, kafka.ErrSchemaSubject, "SCHEMA_SUBJECT"},
		{"protobuf unknown field", pb, "things", `{"id": 1, "colour": "red"}`, kafka.ErrSchema, kafka.ClassSchema},
		{"record strategy without event type", byName, "orders", `{"id": 1, "note": null}`, kafka.ErrSchema, kafka.ClassSchema},
		{"no such subject", avro, "missing", `{"id": 1, "note": null}`, kafka.ErrSchemaSubject, "SCHEMA_SUBJECT"},
		{"subject of another type", avro, "people", `{"id": 1}`, kafka.ErrSchemaSubject, "SCHEMA_SUBJECT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.s.Frame(tc.topic, "", nil, []byte(tc.payload))
			if !errors.Is(err, tc.want) {
				t.Fatalf("Frame: %v, want %v", err, tc.want)
			}
			if _, class := kafka.Classify(err); class != tc.class {
				t.Errorf("class %q, want %q", class, tc.class)
			}
		})
	}
}

// A registry that does not answer is transient (the session restarts),
// never a reason to quarantine; once it answers, the schema is used, and a
// later outage keeps the schema in use.
func TestSchemaRegistryDown(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	reg.SeedSchema("orders-value", 1, 7, sr.Schema{Schema: avroOrder, Type: sr.TypeAvro})
	var down atomic.Bool
	down.Store(true)
	reg.Intercept(func(w http.ResponseWriter, _ *http.Request) bool {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	s, err := kafka.NewSchema(kafka.SchemaOptions{Format: kafka.SchemaAvro, URL: reg.URL(), SubjectStrategy: kafka.SubjectTopicName,
		Timeout: 5 * time.Second, RefreshInterval: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte(`{"id": 1, "note": null}`)
	_, err = s.Frame("orders", "", nil, payload)
	if kind, class := kafka.Classify(err); !errors.Is(err, kafka.ErrSchemaRegistry) || kind != sink.Transient || class != "SCHEMA_REGISTRY" {
		t.Fatalf("Frame with the registry down: %v (%v, %s), want ErrSchemaRegistry, transient", err, kind, class)
	}
	down.Store(false)
	if _, err := s.Frame("orders", "", nil, payload); err != nil {
		t.Fatalf("Frame with the registry up: %v", err)
	}
	down.Store(true)
	if _, err := s.Frame("orders", "", nil, payload); err != nil {
		t.Fatalf("Frame after the registry went down again: %v, want the schema in use", err)
	}
}

// A refused JSON document's error names what broke, on one line.
func TestSchemaJSONError(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	reg.SeedSchema("people-value", 1, 8, sr.Schema{Schema: jsonOrder, Type: sr.TypeJSON})
	_, err := newSchema(t, reg, kafka.SchemaJSONSchema, kafka.SubjectTopicName).Frame("people", "", nil, []byte(`{"id": 1, "colour": "red"}`))
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "colour") {
		t.Fatalf("Frame: %q, want one line naming colour", err)
	}
	t.Log(err)
}

// With schema_registry.schema_id_header, a record's header names the
// schema that frames it (an older version than the subject's latest
// here); a record without the header uses its subject; a header that
// names no schema of the format is the row's error.
func TestSchemaIDHeader(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	v2 := `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"long"},{"name":"note","type":["null","string"],"default":null},{"name":"qty","type":"int","default":1}]}`
	reg.SeedSchema("orders-value", 1, 7, sr.Schema{Schema: avroOrder, Type: sr.TypeAvro})
	reg.SeedSchema("orders-value", 2, 11, sr.Schema{Schema: v2, Type: sr.TypeAvro})
	reg.SeedSchema("people-value", 1, 8, sr.Schema{Schema: jsonOrder, Type: sr.TypeJSON})
	s, err := kafka.NewSchema(kafka.SchemaOptions{Format: kafka.SchemaAvro, URL: reg.URL(), SubjectStrategy: kafka.SubjectTopicName,
		SchemaIDHeader: "schema_id", Timeout: 5 * time.Second, RefreshInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	hdr := func(v string) []kgo.RecordHeader {
		return []kgo.RecordHeader{{Key: "idempotency_key", Value: []byte("k")}, {Key: "schema_id", Value: []byte(v)}}
	}
	payload := []byte(`{"id": 1, "note": null}`)
	out, err := s.Frame("orders", "", hdr("7"), payload)
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := header(t, out); id != 7 {
		t.Errorf("with header schema_id 7: schema id %d", id)
	}
	out, err = s.Frame("orders", "", nil, []byte(`{"id": 1, "note": null, "qty": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := header(t, out); id != 11 {
		t.Errorf("without the header: schema id %d, want the subject's latest 11", id)
	}
	for _, v := range []string{"x", "0", "99", "8"} {
		_, err := s.Frame("orders", "", hdr(v), payload)
		if _, class := kafka.Classify(err); !errors.Is(err, kafka.ErrSchema) || class != kafka.ClassSchema {
			t.Errorf("header schema_id %q: %v (class %s), want ErrSchema", v, err, class)
		}
	}
}

// Keys are framed as string values with the latest schema of <topic>-key.
func TestSchemaKeys(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	reg.SeedSchema("orders-key", 1, 3, sr.Schema{Schema: `"string"`, Type: sr.TypeAvro})
	reg.SeedSchema("people-key", 1, 4, sr.Schema{Schema: `{"type":"string","pattern":"^k-"}`, Type: sr.TypeJSON})
	keys := func(format string) *kafka.Schema {
		s, err := kafka.NewSchema(kafka.SchemaOptions{Format: format, Key: true, URL: reg.URL(),
			SubjectStrategy: kafka.SubjectRecordName, SchemaIDHeader: "schema_id", Timeout: 5 * time.Second, RefreshInterval: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	out, err := keys(kafka.SchemaAvro).Frame("orders", "shop.Order", nil, []byte("k-1"))
	if err != nil {
		t.Fatal(err)
	}
	// Avro string: zigzag length 3 (6), then the bytes.
	if id, body := header(t, out); id != 3 || !bytes.Equal(body, []byte{6, 'k', '-', '1'}) {
		t.Errorf("avro key: id %d body % x", id, body)
	}
	js := keys(kafka.SchemaJSONSchema)
	out, err = js.Frame("people", "", nil, []byte("k-2"))
	if err != nil {
		t.Fatal(err)
	}
	if id, body := header(t, out); id != 4 || string(body) != `"k-2"` {
		t.Errorf("json_schema key: id %d body %s", id, body)
	}
	if _, err := js.Frame("people", "", nil, []byte("other")); !errors.Is(err, kafka.ErrSchema) {
		t.Errorf("a key the schema refuses: %v, want ErrSchema", err)
	}
	if s, _ := kafka.NewSchema(kafka.SchemaOptions{Format: kafka.SchemaNone, Key: true, URL: reg.URL()}); s != nil {
		t.Error("format none frames keys")
	}
}
