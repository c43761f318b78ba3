package forwarder

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// TestSetColumnTypesDeliveryModes: the sink each delivery mode produces
// through gets the table's column types, so that the json formats write
// a bigint aggregateid as Debezium does, on the partition murmur2 of those
// bytes gives. In at-least-once mode that sink is f.sink (openKafka); in
// exactly-once mode f.sink is nil and each session produces through the
// transactional sink openTxn builds, which session gives to
// setColumnTypes. Kafka is kfake, the table a fake catalogue: aggregateid
// bigint NOT NULL, payload jsonb.
func TestSetColumnTypesDeliveryModes(t *testing.T) {
	const (
		topic      = "outbox.event.Order"
		partitions = 3
		cpTopic    = "walpost_checkpoints"
	)
	cases := []struct {
		format     string
		key, value string
	}{
		// Without the types: "42" and the value without its
		// io.debezium.data.Json name.
		{config.FormatJSON, `42`, `"{\"a\": 1}"`},
		{config.FormatJSONSchema, `{"schema":{"type":"int64","optional":false},"payload":42}`,
			`{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":"{\"a\": 1}"}`},
	}
	for _, mode := range []string{config.AtLeastOnce, config.ExactlyOnce} {
		for _, c := range cases {
			t.Run(mode+"/"+c.format, func(t *testing.T) {
				kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic, "outbox"), kfake.SeedTopics(1, cpTopic))
				if err != nil {
					t.Fatal(err)
				}
				defer kc.Close()
				t.Setenv("WALPOST_MAPPING_PROFILE", config.ProfileDebezium)
				t.Setenv("WALPOST_MAPPING_KEY_FORMAT", c.format)
				t.Setenv("WALPOST_MAPPING_VALUE_FORMAT", c.format)
				t.Setenv("WALPOST_DELIVERY_MODE", mode)
				t.Setenv("WALPOST_KAFKA_CHECKPOINT_TOPIC", cpTopic)
				cfg, err := config.Load(nil, config.NeedNothing)
				if err != nil {
					t.Fatal(err)
				}
				cfg.Kafka.Brokers = kc.ListenAddrs()
				cfg.Kafka.Compression = "none"
				f := &Forwarder{cfg: cfg, log: slog.New(slog.DiscardHandler), reg: prometheus.NewRegistry(), m: newMetrics(nil)}
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()

				// The sink the session produces through, as forward and
				// session build it for the mode.
				var s *kafka.Sink
				if eos(f.cfg) {
					s, _, _, err = f.newSession(nil).openTxn(ctx, position.Identity{SystemID: 7, Timeline: 1})
				} else {
					s, err = f.openKafka(ctx)
					f.sink = s
				}
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				if _, err := f.newSession(nil).setColumnTypes(ctx, debeziumCatalogue{}, replication.TableName{Schema: "public", Name: "outbox"}, s); err != nil {
					t.Fatal(err)
				}

				ev := &outbox.Event{ID: "5f0c6c8e-2d3b-4c1a-9a57-0d5e1c8b7a11", IdempotencyKey: "5f0c6c8e-2d3b-4c1a-9a57-0d5e1c8b7a11",
					PartitionKey: "42", HasPartition: true, Topic: "Order", Payload: []byte(`{"a": 1}`),
					CommitLSN: 0x100, CommitTime: time.Now()}
				if eos(f.cfg) {
					if err := s.BeginTxn(); err != nil {
						t.Fatal(err)
					}
				}
				var got sink.Result
				ack := make(chan error, 1)
				s.Produce(ev, sink.AckFunc(func(r sink.Result, err error) { got = r; ack <- err }))
				if err := <-ack; err != nil {
					t.Fatal(err)
				}
				if eos(f.cfg) {
					if err := s.CommitTxn(ctx, kafka.TxnMark{Slot: "walpost", SystemID: 7, Timeline: 1, LSN: 0x100}); err != nil {
						t.Fatal(err)
					}
				}

				r := readOne(ctx, t, kc, topic)
				if string(r.Key) != c.key || string(r.Value) != c.value {
					t.Errorf("record key %s value %s, want key %s value %s (Debezium's for aggregateid bigint NOT NULL, payload jsonb)", r.Key, r.Value, c.key, c.value)
				}
				want := int32(kgo.StickyKeyPartitioner(nil).ForTopic(topic).Partition(&kgo.Record{Key: []byte(c.key)}, partitions))
				if r.Partition != want || got.Partition != want {
					t.Errorf("partition %d (acked %d), want %d: murmur2 of %s", r.Partition, got.Partition, want, c.key)
				}
			})
		}
	}
}

// TestSetColumnTypesCapability: setColumnTypes asserts sink.ColumnTyped,
// not the Kafka sink's type: any sink with the capability gets the
// types, and a sink without it is left alone, the table unread.
func TestSetColumnTypesCapability(t *testing.T) {
	t.Setenv("WALPOST_MAPPING_PROFILE", config.ProfileDebezium)
	t.Setenv("WALPOST_MAPPING_KEY_FORMAT", config.FormatJSON)
	cfg, err := config.Load(nil, config.NeedNothing)
	if err != nil {
		t.Fatal(err)
	}
	f := &session{cfg: cfg}
	table := replication.TableName{Schema: "public", Name: "outbox"}
	s := &typedSink{Sink: sink.Discard}
	if _, err := f.setColumnTypes(t.Context(), debeziumCatalogue{}, table, s); err != nil {
		t.Fatal(err)
	}
	if want := `{"type":"int64","optional":false}`; s.key.Schema != want || !s.key.Number {
		t.Errorf("key type %+v, want schema %s, a number", s.key, want)
	}
	if _, err := f.setColumnTypes(t.Context(), nil, table, sink.Discard); err != nil {
		t.Errorf("a sink without the capability: %v, want nil", err)
	}
}

// typedSink is a sink.ColumnTyped that is not Kafka's.
type typedSink struct {
	sink.Sink
	key, value sink.ColumnType
}

func (s *typedSink) SetColumnTypes(key, value sink.ColumnType) { s.key, s.value = key, value }

// readOne is the first record of topic a read_committed consumer of
// kc sees.
func readOne(ctx context.Context, t *testing.T, kc *kfake.Cluster, topic string) *kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for {
		fs := cl.PollRecords(ctx, 1)
		if ctx.Err() != nil {
			t.Fatalf("no committed record on %s: %v", topic, ctx.Err())
		}
		if rs := fs.Records(); len(rs) > 0 {
			return rs[0]
		}
	}
}

// debeziumCatalogue is a replication.Querier answering ColumnTypes for
// Debezium's outbox table with a bigint aggregateid.
type debeziumCatalogue struct{}

func (debeziumCatalogue) QueryRow(context.Context, string, ...any) pgx.Row {
	panic("QueryRow: only ColumnTypes' Query is expected")
}

func (debeziumCatalogue) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return &columnRows{rows: [][3]any{
		{"id", "uuid", true},
		{"aggregatetype", "varchar", true},
		{"aggregateid", "int8", true},
		{"type", "varchar", true},
		{"payload", "jsonb", false},
	}, i: -1}, nil
}

// columnRows are the rows of ColumnTypes' query: name, typname, attnotnull.
type columnRows struct {
	pgx.Rows // only what ColumnTypes calls is implemented
	rows     [][3]any
	i        int
}

func (r *columnRows) Next() bool { r.i++; return r.i < len(r.rows) }
func (r *columnRows) Err() error { return nil }
func (r *columnRows) Close()     {}

func (r *columnRows) Scan(dest ...any) error {
	if len(dest) != 3 {
		return fmt.Errorf("scan into %d values, want 3", len(dest))
	}
	row := r.rows[r.i]
	*dest[0].(*string), *dest[1].(*string), *dest[2].(*bool) = row[0].(string), row[1].(string), row[2].(bool)
	return nil
}
