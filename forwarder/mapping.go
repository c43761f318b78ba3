package forwarder

import (
	"context"

	"github.com/walpost/walpost/internal/kafkaconf"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink"
)

// setColumnTypes gives s the key and payload column types its record
// formats need (a bytea payload, the json formats of mapping.key_format
// and mapping.value_format), read from the table at each session start;
// dst is the sink the session produces through: s.sink in at-least-once
// mode, the session's transactional sink in exactly-once mode (s.sink is
// nil there). A sink that is not sink.ColumnTyped needs none. A column
// type walpost cannot encode stops walpost (replication.ErrConfig)
// naming the column (kafkaconf.TableTypes).
// It reports whether the payload column is bytea.
func (s *session) setColumnTypes(ctx context.Context, q replication.Querier, table replication.TableName, dst sink.Sink) (binary bool, err error) {
	ct, ok := dst.(sink.ColumnTyped)
	if !ok {
		return false, nil
	}
	kt, vt, err := kafkaconf.TableTypes(ctx, q, table, s.cfg.Mapping)
	if err != nil {
		return false, err
	}
	ct.SetColumnTypes(kt, vt)
	return vt.Binary, nil
}
