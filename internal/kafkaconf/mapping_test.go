package kafkaconf_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/kafkaconf"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink/kafka"
)

// debeziumMapping is the debezium profile's mapping as config.Load makes it.
func debeziumMapping(t *testing.T, keyFormat, valueFormat string, headers ...string) config.Mapping {
	t.Helper()
	t.Setenv("WALPOST_MAPPING_PROFILE", "debezium")
	t.Setenv("WALPOST_MAPPING_KEY_FORMAT", keyFormat)
	t.Setenv("WALPOST_MAPPING_VALUE_FORMAT", valueFormat)
	t.Setenv("WALPOST_MAPPING_HEADER_COLUMNS", strings.Join(headers, ","))
	cfg, err := config.Load(nil, config.NeedNothing)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Mapping
}

// TestLayoutFrom: the debezium profile's mapping is the Debezium layout
// with Debezium's topic template and the header names of
// mapping.header_columns (the layout sink/kafka's record tests build);
// walpost's profile keeps walpost's record, nil with the defaults.
func TestLayoutFrom(t *testing.T) {
	for _, format := range []string{config.FormatString, config.FormatJSON, config.FormatJSONSchema} {
		got := kafkaconf.LayoutFrom(debeziumMapping(t, format, format, "type:header:eventType", "tenant:header"))
		want := kafka.NewLayout(kafka.Layout{Debezium: true, KeyFormat: format, ValueFormat: format, HeaderNames: []string{"eventType", "tenant"}},
			"outbox.event."+kafka.RoutedByValue)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: layout %+v, want %+v", format, got, want)
		}
	}
	t.Setenv("WALPOST_MAPPING_TRACING_COLUMN", "tracingspancontext")
	t.Setenv("WALPOST_MAPPING_TOMBSTONE_ON_EMPTY_PAYLOAD", "true")
	if l := kafkaconf.LayoutFrom(debeziumMapping(t, config.FormatString, config.FormatString)); !l.Tracing || !l.Tombstones {
		t.Errorf("tracing column and tombstones: layout %+v", l)
	}

	if kafkaconf.LayoutFrom(config.Default().Mapping) != nil {
		t.Error("LayoutFrom(the defaults) is not nil: walpost's default record must take the unchanged path")
	}
	m := config.Default().Mapping
	m.TombstoneOnEmptyPayload = true
	if l := kafkaconf.LayoutFrom(m); !reflect.DeepEqual(l, kafka.NewLayout(kafka.Layout{Tombstones: true}, kafka.RoutedByValue)) {
		t.Errorf("walpost profile with tombstones: layout %+v", l)
	}
	m = config.Default().Mapping
	m.TopicTemplate = "events." + config.RoutedByValue
	ev := outbox.Event{ID: "e1", IdempotencyKey: "k1", Topic: "orders", Payload: []byte(`{}`), CommitTime: time.Unix(1, 0)}
	r, err := kafka.BuildRecordWith(&ev, "outbox", kafkaconf.LayoutFrom(m))
	if err != nil || r.Topic != "events.orders" || r.Headers[0].Key != kafka.HeaderIdempotencyKey {
		t.Errorf("walpost profile with a template: %v, %+v; want topic events.orders and walpost's record", err, r)
	}
}

// TestColumns: the columns walpost run's stream reads, and walpost check
// looks for, are the mapping's, the tracing column included.
func TestColumns(t *testing.T) {
	t.Setenv("WALPOST_MAPPING_TRACING_COLUMN", "trace")
	t.Setenv("WALPOST_MAPPING_TIMESTAMP_COLUMN", "at")
	m := debeziumMapping(t, config.FormatString, config.FormatString, "type:header:eventType")
	want := replication.Columns{Debezium: true, ID: m.IDColumn, Key: m.KeyColumn, Payload: m.PayloadColumn, Topic: m.TopicColumn,
		Headers: []string{"type"}, Timestamp: "at", Tracing: "trace"}
	if got := kafkaconf.Columns(m); !reflect.DeepEqual(got, want) {
		t.Errorf("Columns = %+v, want %+v", got, want)
	}
	if got := kafkaconf.Columns(config.Default().Mapping); got.Debezium || got.ID != "id" || got.Key != "idempotency_key" || len(got.Headers) != 0 {
		t.Errorf("walpost defaults: %+v", got)
	}
}

// TestMappingTypesRefusesBytea: a bytea column walpost sends as text (the
// key, id, topic and header columns, walpost's partition_key) is refused
// naming the column and its key; a bytea payload is Binary in both
// profiles.
func TestMappingTypesRefusesBytea(t *testing.T) {
	walpost := config.Default().Mapping
	deb := debeziumMapping(t, config.FormatString, config.FormatString, "type:header:eventType")
	types := func(bytea ...string) func(string) (string, bool, bool) {
		return func(c string) (string, bool, bool) {
			for _, b := range bytea {
				if c == b {
					return "bytea", true, true
				}
			}
			return "text", true, true
		}
	}
	for _, c := range []struct {
		name   string
		m      config.Mapping
		column string
		want   string // "" accepted, binary payload
	}{
		{"walpost payload", walpost, "payload", ""},
		{"debezium payload", deb, "payload", ""},
		{"walpost key", walpost, "idempotency_key", `column "idempotency_key" (mapping.key_column) is bytea`},
		{"walpost partition_key", walpost, "partition_key", `column "partition_key" () is bytea`},
		{"walpost topic", walpost, "topic", `column "topic" (mapping.topic_column) is bytea`},
		{"debezium key", deb, "aggregateid", `column "aggregateid" (mapping.key_column) is bytea`},
		{"debezium id", deb, "id", `column "id" (mapping.id_column) is bytea`},
		{"debezium header", deb, "type", `column "type" (mapping.header_columns) is bytea`},
	} {
		_, vt, err := kafkaconf.MappingTypes(c.m, types(c.column))
		switch {
		case c.want == "" && (err != nil || !vt.Binary):
			t.Errorf("%s: %+v, %v; want a binary payload", c.name, vt, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
	if _, vt, err := kafkaconf.MappingTypes(walpost, types()); err != nil || vt.Binary {
		t.Errorf("jsonb payload: %+v, %v; want not binary", vt, err)
	}
}
