package config

import (
	"slices"
	"strings"
	"testing"
)

// TestMappingProfiles: each profile's defaults are applied once, in Load;
// a key set on its own wins over its profile's value.
func TestMappingProfiles(t *testing.T) {
	cases := []struct {
		env  map[string]string
		want Mapping
	}{
		{minimalEnv, Mapping{Profile: "walpost", IDColumn: "id", KeyColumn: "idempotency_key", PayloadColumn: "payload",
			TopicColumn: "topic", TopicTemplate: "${routedByValue}", KeyFormat: "string", ValueFormat: "string"}},
		{with(minimalEnv, "WALPOST_MAPPING_PROFILE", "debezium"), Mapping{Profile: "debezium", IDColumn: "id", KeyColumn: "aggregateid",
			PayloadColumn: "payload", TopicColumn: "aggregatetype", TopicTemplate: "outbox.event.${routedByValue}", KeyFormat: "string", ValueFormat: "string"}},
		{with(minimalEnv, "WALPOST_MAPPING_PROFILE", "debezium", "WALPOST_MAPPING_KEY_COLUMN", "entity_id",
			"WALPOST_MAPPING_TOPIC_TEMPLATE", "events.${routedByValue}.v1", "WALPOST_MAPPING_HEADER_COLUMNS", "type:header:eventType, tenant:header",
			"WALPOST_MAPPING_TIMESTAMP_COLUMN", "occurred_at", "WALPOST_MAPPING_VALUE_FORMAT", "json_schema"),
			Mapping{Profile: "debezium", IDColumn: "id", KeyColumn: "entity_id", PayloadColumn: "payload", TopicColumn: "aggregatetype",
				TopicTemplate: "events.${routedByValue}.v1", HeaderColumns: []string{"type:header:eventType", "tenant:header"},
				TimestampColumn: "occurred_at", KeyFormat: "string", ValueFormat: "json_schema"}},
	}
	for _, c := range cases {
		cfg, err := load(t, c.env, "", NeedAll)
		if err != nil {
			t.Fatalf("%v: %v", c.env, err)
		}
		got := cfg.Mapping
		if got.Profile != c.want.Profile || got.IDColumn != c.want.IDColumn || got.KeyColumn != c.want.KeyColumn ||
			got.PayloadColumn != c.want.PayloadColumn || got.TopicColumn != c.want.TopicColumn || got.TopicTemplate != c.want.TopicTemplate ||
			!slices.Equal(got.HeaderColumns, c.want.HeaderColumns) || got.TimestampColumn != c.want.TimestampColumn ||
			got.KeyFormat != c.want.KeyFormat || got.ValueFormat != c.want.ValueFormat {
			t.Errorf("mapping %+v, want %+v", got, c.want)
		}
	}
	if d := Default().Mapping; d.Profile != "walpost" || d.KeyColumn != "idempotency_key" {
		t.Errorf("Default().Mapping = %+v, want the walpost profile applied", d)
	}
	cfg, _ := load(t, with(minimalEnv, "WALPOST_MAPPING_PROFILE", "debezium", "WALPOST_MAPPING_HEADER_COLUMNS", "type:header:eventType,tenant:header"), "", NeedAll)
	if h := cfg.Mapping.Headers(); len(h) != 2 || h[0] != (HeaderColumn{"type", "eventType"}) || h[1] != (HeaderColumn{"tenant", "tenant"}) {
		t.Errorf("Headers() = %v", h)
	}
}

// TestMappingErrors: each bad mapping value is refused naming its key, its
// variable and what is allowed.
func TestMappingErrors(t *testing.T) {
	deb := with(minimalEnv, "WALPOST_MAPPING_PROFILE", "debezium")
	cases := []struct {
		env  map[string]string
		want []string
	}{
		{with(minimalEnv, "WALPOST_MAPPING_PROFILE", "Debezium-Outbox"), []string{"mapping.profile (WALPOST_MAPPING_PROFILE)", `"Debezium-Outbox"`, "walpost or debezium"}},
		{with(deb, "WALPOST_MAPPING_KEY_COLUMN", "aggregate id"), []string{"mapping.key_column (WALPOST_MAPPING_KEY_COLUMN)", "a column name"}},
		{with(deb, "WALPOST_MAPPING_TOPIC_TEMPLATE", "outbox/${routedByValue}"), []string{"mapping.topic_template", "Kafka topic name"}},
		{with(deb, "WALPOST_MAPPING_HEADER_COLUMNS", "type:envelope:eventType"), []string{"mapping.header_columns", `placement "envelope" is not supported`}},
		{with(deb, "WALPOST_MAPPING_HEADER_COLUMNS", "type"), []string{"mapping.header_columns", "column:header[:name]"}},
		{with(deb, "WALPOST_MAPPING_HEADER_COLUMNS", "type:header:id"), []string{"mapping.header_columns", `"id" is taken`}},
		{with(deb, "WALPOST_MAPPING_VALUE_FORMAT", "avro"), []string{"mapping.value_format (WALPOST_MAPPING_VALUE_FORMAT)", "json_schema"}},
		{with(minimalEnv, "WALPOST_MAPPING_KEY_FORMAT", "json"), []string{"mapping.key_format", "need mapping.profile = debezium"}},
		{with(minimalEnv, "WALPOST_MAPPING_HEADER_COLUMNS", "type:header"), []string{"mapping.header_columns", "mapping.profile = debezium"}},
		{with(deb, "WALPOST_MAPPING_TRACING_COLUMN", "span context"), []string{"mapping.tracing_column (WALPOST_MAPPING_TRACING_COLUMN)", `"span context"`, "a text column's name"}},
		{with(minimalEnv, "WALPOST_MAPPING_TRACING_COLUMN", "tracingspancontext"), []string{"mapping.tracing_column", "headers column", "writer.WithTraceContext"}},
	}
	for _, c := range cases {
		_, err := load(t, c.env, "", NeedAll)
		if err == nil {
			t.Errorf("%v: accepted", c.env)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %v; want it to say %s", c.env, err, w)
			}
		}
	}
}
