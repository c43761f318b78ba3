package forwarder

import (
	"context"
	"fmt"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/kafkaconf"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// Columns are the outbox columns the stream reads under mapping m.
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

// setColumnTypes gives s the key and payload column types its record
// formats need (a bytea payload, the json formats of mapping.key_format
// and mapping.value_format), read from the table at each session start;
// dst is the sink the session produces through: s.sink in at-least-once
// mode, the session's transactional sink in exactly-once mode (s.sink is
// nil there). A sink that is not sink.ColumnTyped needs none. A column
// type walpost cannot encode stops walpost (replication.ErrConfig)
// naming the column.
// It reports whether the payload column is bytea.
func (s *session) setColumnTypes(ctx context.Context, q replication.Querier, table replication.TableName, dst sink.Sink) (binary bool, err error) {
	ct, ok := dst.(sink.ColumnTyped)
	if !ok {
		return false, nil
	}
	kt, vt, err := TableTypes(ctx, q, table, s.cfg.Mapping)
	if err != nil {
		return false, err
	}
	ct.SetColumnTypes(kt, vt)
	return vt.Binary, nil
}

// TableTypes reads the table's key and payload column types for the
// record formats of m (kafkaconf.MappingTypes).
func TableTypes(ctx context.Context, conn replication.Querier, table replication.TableName, m config.Mapping) (key, value kafka.ColumnType, err error) {
	types, err := replication.ColumnTypes(ctx, conn, table)
	if err != nil {
		return key, value, fmt.Errorf("read column types of %s: %w", table, err)
	}
	key, value, err = kafkaconf.MappingTypes(m, func(c string) (string, bool, bool) {
		t, ok := types[c]
		return t.Type, t.NotNull, ok
	})
	if err != nil {
		return key, value, fmt.Errorf("%w: %s: %w", replication.ErrConfig, table, err)
	}
	return key, value, nil
}
