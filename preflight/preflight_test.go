package preflight

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/replication"
)

// closedAddr is a local address nobody listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func testConfig(pgAddr string, brokers []string, topic string) *config.Config {
	return &config.Config{
		Postgres: config.Postgres{
			URL:  "postgres://walpost:s3cret@" + pgAddr + "/walpost?sslmode=disable&connect_timeout=5",
			Slot: "walpost", Publication: "walpost_outbox", Table: "outbox", PoisonTable: "poison_outbox",
		},
		Kafka: config.Kafka{Brokers: brokers, Topic: topic, ClientID: "walpost-test"},
	}
}

func TestCheckWriteText(t *testing.T) {
	for _, c := range []struct {
		check Check
		want  string
	}{
		{Check{Name: "wal_level", Status: OK, Detail: "logical"}, "OK    wal_level      logical\n"},
		{Check{Name: "topic", Status: Fail, Detail: "no"}, "FAIL  topic          no\n"},
		{Check{Name: "publication", Status: Skip, Detail: "outbox table missing"}, "SKIP  publication    outbox table missing\n"},
		{Check{Name: "a_name_longer_than_14", Status: OK, Detail: "x"}, "OK    a_name_longer_than_14 x\n"},
	} {
		var b bytes.Buffer
		if err := c.check.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		if b.String() != c.want {
			t.Errorf("WriteText(%+v) = %q, want %q", c.check, b.String(), c.want)
		}
	}
}

// TestRunNoPostgres: without PostgreSQL the connection check fails (its
// message redacted) and the other PostgreSQL checks are skipped; Kafka's
// run regardless. Every check has one line, in order, on w as in the
// Result.
func TestRunNoPostgres(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "events"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var streamed bytes.Buffer
	res := Run(ctx, testConfig(closedAddr(t), c.ListenAddrs(), "events"), &streamed)

	wantNames := []string{"postgres", "wal_level", "replication", "sessions", "outbox", "publication", "slot", "position", "capacity", "poison_table", "kafka", "topic"}
	wantStatus := []Status{Fail, Skip, Skip, Skip, Skip, Skip, Skip, Skip, Skip, Skip, OK, OK}
	if len(res.Checks) != len(wantNames) {
		t.Fatalf("%d checks, want %d:\n%s", len(res.Checks), len(wantNames), streamed.String())
	}
	for i, ch := range res.Checks {
		if ch.Name != wantNames[i] || ch.Status != wantStatus[i] {
			t.Errorf("check %d = %s %s, want %s %s", i, ch.Status, ch.Name, wantStatus[i], wantNames[i])
		}
		if (ch.Err != nil) != (ch.Status == Fail) {
			t.Errorf("check %s: status %s with Err %v", ch.Name, ch.Status, ch.Err)
		}
	}
	pg := res.Checks[0]
	if !strings.Contains(pg.Detail, "cannot connect") || !strings.Contains(pg.Detail, "postgres.url") ||
		strings.Contains(pg.Detail, "s3cret") || strings.Contains(pg.Err.Error(), "s3cret") {
		t.Errorf("postgres FAIL detail: %q", pg.Detail)
	}
	if got := res.Checks[11].Detail; !strings.HasPrefix(got, `"events" has 2 partition(s), max.message.bytes `) {
		t.Errorf("topic OK detail: %q", got)
	}
	if res.Failed() != 1 {
		t.Errorf("Failed() = %d, want 1", res.Failed())
	}
	var rendered bytes.Buffer
	if err := res.WriteText(&rendered); err != nil {
		t.Fatal(err)
	}
	if rendered.String() != streamed.String() {
		t.Errorf("WriteText differs from the lines written while running:\n%s\n---\n%s", rendered.String(), streamed.String())
	}
}

// TestRunKafka: the topic check against a fake cluster, and an unreachable
// broker that skips it.
func TestRunKafka(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "events"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pg := closedAddr(t)

	last2 := func(cfg *config.Config) (Check, Check) {
		t.Helper()
		res := Run(ctx, cfg, nil)
		if len(res.Checks) != 12 {
			t.Fatalf("%d checks, want 12", len(res.Checks))
		}
		return res.Checks[10], res.Checks[11]
	}

	t.Run("topic missing", func(t *testing.T) {
		_, topic := last2(testConfig(pg, c.ListenAddrs(), "nope"))
		if topic.Status != Fail || !strings.Contains(topic.Detail, `"nope"`) || !strings.Contains(topic.Detail, "kafka.create_topic_partitions") {
			t.Errorf("topic: %+v", topic)
		}
	})
	t.Run("topic missing, created by run", func(t *testing.T) {
		cfg := testConfig(pg, c.ListenAddrs(), "nope")
		cfg.Kafka.CreateTopicPartitions = 3
		_, topic := last2(cfg)
		if topic.Status != OK || !strings.Contains(topic.Detail, "walpost run creates it with 3 partition(s)") {
			t.Errorf("topic: %+v", topic)
		}
	})
	checkpointCheck := func(cfg *config.Config) Check {
		t.Helper()
		cfg.Delivery.Mode = config.ExactlyOnce
		res := Run(ctx, cfg, nil)
		if len(res.Checks) != 13 || res.Checks[12].Name != "checkpoint_topic" {
			t.Fatalf("checks %+v, want 13 ending with checkpoint_topic", res.Checks)
		}
		return res.Checks[12]
	}
	t.Run("exactly-once: checkpoint topic missing", func(t *testing.T) {
		cfg := testConfig(pg, c.ListenAddrs(), "events")
		cfg.Kafka.CheckpointTopic = "cp"
		if cp := checkpointCheck(cfg); cp.Status != Fail || !strings.Contains(cp.Detail, "--partitions 1 --config cleanup.policy=compact") {
			t.Errorf("checkpoint_topic: %+v", cp)
		}
	})
	t.Run("exactly-once: checkpoint topic missing, created by run", func(t *testing.T) {
		cfg := testConfig(pg, c.ListenAddrs(), "events")
		cfg.Kafka.CheckpointTopic, cfg.Kafka.CreateTopicPartitions = "cp", 3
		if cp := checkpointCheck(cfg); cp.Status != OK || !strings.Contains(cp.Detail, "walpost run creates it with 1 partition") {
			t.Errorf("checkpoint_topic: %+v", cp)
		}
	})
	t.Run("exactly-once: checkpoint topic segments", func(t *testing.T) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		compact, small, big := "compact", "16777216", "1073741824"
		for _, tc := range []struct {
			topic, segment string
			want           Status
		}{{"cp_small", small, OK}, {"cp_big", big, Warn}} {
			resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": &compact, "segment.bytes": &tc.segment}, tc.topic)
			if err == nil {
				err = resp.Err
			}
			if err != nil {
				t.Fatal(err)
			}
			cfg := testConfig(pg, c.ListenAddrs(), "events")
			cfg.Kafka.CheckpointTopic = tc.topic
			cp := checkpointCheck(cfg)
			if cp.Status != tc.want {
				t.Errorf("segment.bytes=%s: %+v, want %s", tc.segment, cp, tc.want)
			}
			if tc.want == Warn && !strings.Contains(cp.Detail, "--entity-name cp_big --add-config segment.bytes=16777216") {
				t.Errorf("segment.bytes=%s: %q does not name the fix", tc.segment, cp.Detail)
			}
		}
	})
	t.Run("exactly-once: checkpoint topic not compacted", func(t *testing.T) {
		cfg := testConfig(pg, c.ListenAddrs(), "events")
		cfg.Kafka.CheckpointTopic = "events"
		if cp := checkpointCheck(cfg); cp.Status != Fail || !strings.Contains(cp.Detail, "is not compacted") {
			t.Errorf("checkpoint_topic: %+v", cp)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		addr := closedAddr(t)
		k, topic := last2(testConfig(pg, []string{addr}, "events"))
		if k.Status != Fail || !strings.Contains(k.Detail, addr) || !strings.Contains(k.Detail, "unreachable") || !strings.Contains(k.Detail, "WALPOST_KAFKA_BROKERS") {
			t.Errorf("kafka: %+v", k)
		}
		if topic.Status != Skip || topic.Detail != "Kafka unreachable" {
			t.Errorf("topic: %+v", topic)
		}
	})
}

// TestFailKeepsChain: a failure's Err still matches the sentinel it wraps.
func TestFailKeepsChain(t *testing.T) {
	r := &runner{}
	r.fail("slot", errors.Join(replication.ErrSlotLost, errors.New("password=hunter2")))
	c := r.checks[0]
	if !errors.Is(c.Err, replication.ErrSlotLost) {
		t.Errorf("Err %v does not match ErrSlotLost", c.Err)
	}
	if strings.Contains(c.Detail, "hunter2") || strings.Contains(c.Err.Error(), "hunter2") {
		t.Errorf("password shown: %q", c.Detail)
	}
}

// TestCheckSchemaRegistry: walpost check looks at the default topic's
// subjects (value and key) in the registry; none of its lines without a
// registry format.
func TestCheckSchemaRegistry(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	reg.SeedSchema("orders-value", 1, 7, sr.Schema{Schema: `{"type":"record","name":"O","fields":[{"name":"id","type":"long"}]}`, Type: sr.TypeAvro})
	reg.SeedSchema("orders-key", 1, 3, sr.Schema{Schema: `"string"`, Type: sr.TypeAvro})
	run := func(mod func(c *config.Config)) []Check {
		cfg := config.Default()
		cfg.Kafka.Topic = "orders"
		cfg.Schema.URL = reg.URL()
		mod(cfg)
		r := &runner{}
		checkSchemaRegistry(cfg, r)
		return r.checks
	}
	if got := run(func(*config.Config) {}); len(got) != 0 {
		t.Errorf("without a registry format: %+v, want no check", got)
	}
	got := run(func(c *config.Config) {
		c.Schema.ValueFormat, c.Schema.KeyFormat = config.SchemaAvro, config.SchemaAvro
	})
	if len(got) != 1 || got[0].Status != OK || !strings.Contains(got[0].Detail, "subject orders-value: avro schema id 7") ||
		!strings.Contains(got[0].Detail, "subject orders-key: avro schema id 3") {
		t.Errorf("both subjects registered: %+v", got)
	}
	got = run(func(c *config.Config) { c.Kafka.Topic, c.Schema.ValueFormat = "missing", config.SchemaAvro })
	if len(got) != 1 || got[0].Status != Fail || !strings.Contains(got[0].Detail, "register the subject's schema") {
		t.Errorf("subject missing: %+v", got)
	}
	got = run(func(c *config.Config) { c.Schema.ValueFormat = config.SchemaJSONSchema })
	if len(got) != 1 || got[0].Status != Fail || !strings.Contains(got[0].Detail, "AVRO schema") {
		t.Errorf("a schema of another format: %+v", got)
	}
	got = run(func(c *config.Config) {
		c.Schema.ValueFormat, c.Schema.SubjectStrategy, c.Schema.URL = config.SchemaAvro, config.SubjectRecordName, "http://"+closedAddr(t)
	})
	if len(got) != 1 || got[0].Status != Fail || !strings.Contains(got[0].Detail, "schema registry unreachable") {
		t.Errorf("registry down: %+v", got)
	}
}

// The sessions check names what the role or database sets, and lists as 0
// only the settings the server has (transaction_timeout from 17).
func TestSessionsDetail(t *testing.T) {
	before17 := map[string]string{"idle_session_timeout": "0", "idle_in_transaction_session_timeout": "0", "statement_timeout": "0", "lock_timeout": "0"}
	if got, want := sessionsDetail(before17, "u", "d"), `role "u" on database "d": idle_session_timeout, idle_in_transaction_session_timeout, statement_timeout, lock_timeout are 0`; got != want {
		t.Errorf("before 17: %q, want %q", got, want)
	}
	on17 := map[string]string{"idle_session_timeout": "0", "idle_in_transaction_session_timeout": "0", "statement_timeout": "0", "lock_timeout": "0", "transaction_timeout": "1s"}
	if got := sessionsDetail(on17, "u", "d"); !strings.Contains(got, "transaction_timeout=1s") || !strings.Contains(got, "walpost sets each to 0") {
		t.Errorf("17 with transaction_timeout on the role: %q", got)
	}
}
