package kafkaconf

import (
	"fmt"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// LayoutFrom is the layout of the configuration's mapping: nil for
// walpost's own record with the identity topic template.
func LayoutFrom(m config.Mapping) *kafka.Layout {
	routed := m.TopicTemplate == config.RoutedByValue
	if m.Profile != config.ProfileDebezium {
		if routed && !m.TombstoneOnEmptyPayload {
			return nil
		}
		return kafka.NewLayout(kafka.Layout{Tombstones: m.TombstoneOnEmptyPayload}, m.TopicTemplate)
	}
	l := kafka.Layout{Debezium: true, KeyFormat: m.KeyFormat, ValueFormat: m.ValueFormat, Tombstones: m.TombstoneOnEmptyPayload, Tracing: m.TracingColumn != ""}
	for _, h := range m.Headers() {
		l.HeaderNames = append(l.HeaderNames, h.Header)
	}
	return kafka.NewLayout(l, m.TopicTemplate)
}

// MappingTypes are the key and payload column types the record formats
// of m need, from the table's columns (types(column) = PostgreSQL type
// name and NOT NULL): a bytea payload column is Binary in every profile
// and format (its record value is the bytes, as Debezium's
// BinaryDataConverter and ByteArrayConverter write them; base64 in the
// json formats, as JsonConverter writes Connect bytes), and the json
// formats of the debezium profile need the Connect type of the key and
// payload columns. A column walpost cannot encode is an error naming it
// and its key: a bytea column anywhere but the payload (the key, id,
// topic and header columns are text: the idempotency key, a topic name
// and header strings), or a type the json formats do not reproduce.
func MappingTypes(m config.Mapping, types func(column string) (pgType string, notNull, ok bool)) (key, value kafka.ColumnType, err error) {
	for _, c := range textColumns(m) {
		if t, _, ok := types(c.column); ok && t == "bytea" {
			return key, value, fmt.Errorf("column %q (%s) is bytea, which walpost cannot encode there: it sends this column as text (%s); only the payload column (mapping.payload_column) may be bytea; fix: make the column text, or map another column", c.column, c.key, c.as)
		}
	}
	if t, _, ok := types(m.PayloadColumn); ok && t == "bytea" {
		value.Binary = true
	}
	if m.Profile != config.ProfileDebezium {
		return key, value, nil
	}
	one := func(formatKey, format, columnKey, column string, plain kafka.ColumnType) (kafka.ColumnType, error) {
		if format == config.FormatString {
			return plain, nil
		}
		t, notNull, ok := types(column)
		if !ok {
			return kafka.ColumnType{}, fmt.Errorf("%s = %s: the table has no column %q (%s)", formatKey, format, column, columnKey)
		}
		c, err := kafka.ConnectType(t, notNull)
		if err != nil {
			return kafka.ColumnType{}, fmt.Errorf("%s = %s: column %q (%s) has %v; use %s = string", formatKey, format, column, columnKey, err, formatKey)
		}
		return c, nil
	}
	if key, err = one("mapping.key_format", m.KeyFormat, "mapping.key_column", m.KeyColumn, key); err != nil {
		return key, value, err
	}
	value, err = one("mapping.value_format", m.ValueFormat, "mapping.payload_column", m.PayloadColumn, value)
	return key, value, err
}

// SetTableTypes gives s the key and payload column types of the table
// whose columns types describes (column → PostgreSQL type name and NOT
// NULL, as replication.ColumnTypes reads them), MappingTypes of m; a
// column walpost cannot encode is MappingTypes' error. The commands that
// produce outbox rows beside walpost run (recover, resend in exactly-once
// mode) call it as walpost run does at each session start.
func SetTableTypes(s sink.ColumnTyped, m config.Mapping, types func(column string) (pgType string, notNull, ok bool)) error {
	kt, vt, err := MappingTypes(m, types)
	if err != nil {
		return err
	}
	s.SetColumnTypes(kt, vt)
	return nil
}

// mappedColumn is a column the record carries as text.
type mappedColumn struct{ column, key, as string }

// textColumns are the columns of m whose text the record carries as it
// is (every mapped column but the payload).
func textColumns(m config.Mapping) []mappedColumn {
	keyAs, idAs := "the record key and the idempotency_key header", "the outbox_id header"
	if m.Profile == config.ProfileDebezium {
		keyAs, idAs = "the record key", "the id header and the idempotency key"
	}
	out := []mappedColumn{
		{m.KeyColumn, "mapping.key_column", keyAs},
		{m.IDColumn, "mapping.id_column", idAs},
		{m.TopicColumn, "mapping.topic_column", "the topic name"},
	}
	for _, h := range m.Headers() {
		out = append(out, mappedColumn{h.Column, "mapping.header_columns", "the header " + h.Header})
	}
	if m.Profile == config.ProfileWalpost {
		out = append(out, mappedColumn{"partition_key", "", "the partition key"})
	}
	return out
}
