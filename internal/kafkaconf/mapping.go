package kafkaconf

import (
	"context"
	"fmt"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/replication"
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

// Columns are the outbox columns the stream reads under mapping m
// (walpost run's stream, and walpost check's look at the table).
func Columns(m config.Mapping) replication.Columns {
	c := replication.Columns{
		Debezium: m.Profile == config.ProfileDebezium,
		ID:       m.IDColumn, Key: m.KeyColumn, Payload: m.PayloadColumn, Topic: m.TopicColumn,
		Timestamp: m.TimestampColumn, Tracing: m.TracingColumn,
	}
	for _, h := range m.Headers() {
		c.Headers = append(c.Headers, h.Column)
	}
	return c
}

// TableTypes reads the table's key and payload column types for the
// record formats of m (MappingTypes); a column walpost cannot encode is
// replication.ErrConfig naming the table.
func TableTypes(ctx context.Context, conn replication.Querier, table replication.TableName, m config.Mapping) (key, value kafka.ColumnType, err error) {
	types, err := replication.ColumnTypes(ctx, conn, table)
	if err != nil {
		return key, value, fmt.Errorf("read column types of %s: %w", table, err)
	}
	key, value, err = MappingTypes(m, Lookup(types))
	if err != nil {
		return key, value, fmt.Errorf("%w: %s: %w", replication.ErrConfig, table, err)
	}
	return key, value, nil
}

// Lookup is the types argument of MappingTypes and SetTableTypes for the
// columns replication.ColumnTypes read: a column's PostgreSQL type name,
// whether it is NOT NULL, and whether the table has it.
func Lookup(types map[string]replication.ColumnType) func(column string) (pgType string, notNull, ok bool) {
	return func(c string) (string, bool, bool) {
		t, ok := types[c]
		return t.Type, t.NotNull, ok
	}
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
