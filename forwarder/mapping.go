package forwarder

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink/kafka"
)

// Columns are the outbox columns the stream reads under mapping m.
func Columns(m config.Mapping) replication.Columns {
	c := replication.Columns{
		Debezium: m.Profile == config.ProfileDebezium,
		ID:       m.IDColumn, Key: m.KeyColumn, Payload: m.PayloadColumn, Topic: m.TopicColumn,
		Timestamp: m.TimestampColumn,
	}
	for _, h := range m.Headers() {
		c.Headers = append(c.Headers, h.Column)
	}
	return c
}

// setColumnTypes gives the Kafka sink the key and payload column types
// its json formats write (mapping.key_format, mapping.value_format), read
// from the table at each session start; a type they cannot write stops
// walpost (replication.ErrConfig).
func (f *Forwarder) setColumnTypes(ctx context.Context, conn *pgx.Conn, table replication.TableName) error {
	ks, ok := f.sink.(*kafka.Sink)
	m := f.cfg.Mapping
	if !ok || m.Profile != config.ProfileDebezium || (m.KeyFormat == config.FormatString && m.ValueFormat == config.FormatString) {
		return nil
	}
	kt, vt, err := TableTypes(ctx, conn, table, m)
	if err != nil {
		return err
	}
	ks.SetColumnTypes(kt, vt)
	return nil
}

// TableTypes reads the table's key and payload column types for the
// json formats of m (kafka.MappingTypes).
func TableTypes(ctx context.Context, conn replication.Querier, table replication.TableName, m config.Mapping) (key, value kafka.ColumnType, err error) {
	types, err := replication.ColumnTypes(ctx, conn, table)
	if err != nil {
		return key, value, fmt.Errorf("read column types of %s: %w", table, err)
	}
	key, value, err = kafka.MappingTypes(m, func(c string) (string, bool, bool) {
		t, ok := types[c]
		return t.Type, t.NotNull, ok
	})
	if err != nil {
		return key, value, fmt.Errorf("%w: %s: %w", replication.ErrConfig, table, err)
	}
	return key, value, nil
}
