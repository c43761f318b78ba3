package status

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/config"
)

// -update rewrites the golden files.
var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func ptr[T any](v T) *T { return &v }

// healthyStatus is a fixed report of a walpost that is streaming.
func healthyStatus() *Report {
	return &Report{
		Postgres: Postgres{Database: "shop", Version: "17.2", CurrentWALLSN: ptr("3/1A2B4000")},
		Slot: Slot{
			Name: "walpost", Exists: true, SlotType: ptr("logical"), Plugin: ptr("pgoutput"), Database: ptr("shop"),
			Active: ptr(true), ActivePID: ptr(int32(4242)),
			ConfirmedFlushLSN: ptr("3/1A2B3F00"), RestartLSN: ptr("3/19000028"),
			LagBytes: ptr(int64(256)), RetainedWALBytes: ptr(int64(19087320)),
			WALStatus: ptr("reserved"), SafeWALSizeBytes: ptr(int64(1054867456)),
			Failover: ptr(true), Synced: ptr(false),
			Standbys: []StandbySlot{{Standby: "db-replica:5432", State: "synced", Confirmed: ptr("3/1A2B3E00")}},
		},
		Publication: Publication{Name: "walpost_outbox", Exists: true, AllTables: ptr(false),
			Tables: []string{"public.outbox"}, Operations: []string{"insert"}},
		Outbox: Outbox{Table: "public.outbox", RowEstimate: ptr(int64(1200)), RowEstimateSource: ptr("pg_stat_user_tables.n_live_tup")},
		Poison: Poison{Table: "poison_outbox", Pending: ptr(int64(0)), Replayed: ptr(int64(2))},
		Kafka: Kafka{Brokers: []string{"kafka-1:9092", "kafka-2:9092"}, Topic: "outbox", Partitions: ptr(3),
			EndOffsets: []Partition{
				{Partition: 0, EndOffset: ptr(int64(500))},
				{Partition: 1, EndOffset: ptr(int64(498))},
				{Partition: 2, EndOffset: ptr(int64(502))},
			},
			EndOffsetSum: ptr(int64(1500)),
		},
		Notes: []string{},
	}
}

// degradedStatus is a fixed report with no slot yet, unlimited WAL, a
// publication that covers too much, quarantined events and Kafka down.
func degradedStatus() *Report {
	return &Report{
		Postgres: Postgres{Database: "shop", Version: "16.4", CurrentWALLSN: ptr("0/3000148")},
		Slot:     Slot{Name: "walpost", Error: ptr(`slot "walpost" does not exist: walpost run creates it`)},
		Publication: Publication{Name: "walpost_outbox", Exists: true, AllTables: ptr(false),
			Tables: []string{"public.orders", "public.outbox"}, Operations: []string{"insert", "update"}},
		Outbox: Outbox{Table: "public.outbox", Error: ptr("no statistics yet (never analyzed)")},
		Poison: Poison{Table: "poison_outbox", Pending: ptr(int64(3)), Replayed: ptr(int64(0))},
		Kafka: Kafka{Brokers: []string{"127.0.0.1:9092"}, Topic: "outbox",
			Error: ptr("brokers 127.0.0.1:9092 unreachable: no broker answered within 10s")},
		Notes: []string{
			`publication: config error: publication "walpost_outbox" also covers "public"."orders": it must cover only the outbox: ALTER PUBLICATION walpost_outbox DROP TABLE "public"."orders"`,
			"poison: 3 event(s) quarantined and not replayed: see walpost poison list, then walpost poison replay",
		},
	}
}

// TestStatusGolden renders fixed reports to text and JSON and compares
// them with testdata/status*.golden; go test -run StatusGolden -update
// rewrites them after an intended change (review the diff).
func TestStatusGolden(t *testing.T) {
	cases := []struct {
		name string
		r    *Report
	}{
		{"status", healthyStatus()},
		{"status_degraded", degradedStatus()},
	}
	for _, c := range cases {
		for _, format := range []string{"txt", "json"} {
			t.Run(c.name+"."+format, func(t *testing.T) {
				var buf bytes.Buffer
				var err error
				if format == "json" {
					err = c.r.WriteJSON(&buf)
				} else {
					err = c.r.WriteText(&buf)
				}
				if err != nil {
					t.Fatal(err)
				}
				path := filepath.Join("testdata", c.name+"."+format+".golden")
				if *update {
					if err := os.MkdirAll("testdata", 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run go test -run StatusGolden -update to create it)", err)
				}
				if got := buf.String(); got != string(want) {
					t.Fatalf("%s differs from the rendering (rerun with -update if intended)\n--- got\n%s\n--- want\n%s", path, got, want)
				}
			})
		}
	}
}

// TestStatusJSONRoundTrip: the JSON decodes back to the same report, and
// unknown values are null, not omitted.
func TestStatusJSONRoundTrip(t *testing.T) {
	for _, r := range []*Report{healthyStatus(), degradedStatus()} {
		var buf bytes.Buffer
		if err := r.WriteJSON(&buf); err != nil {
			t.Fatal(err)
		}
		var back Report
		if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(&back, r) {
			t.Fatalf("round trip differs:\n%+v\n%+v", back, *r)
		}
	}
	var buf bytes.Buffer
	_ = degradedStatus().WriteJSON(&buf)
	var m struct{ Slot, Kafka map[string]any }
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"active", "confirmed_flush_lsn", "lag_bytes", "safe_wal_size_bytes"} {
		if v, ok := m.Slot[key]; !ok || v != nil {
			t.Errorf("slot.%s = %v (present %v), want null", key, v, ok)
		}
	}
	if v, ok := m.Kafka["partitions"]; !ok || v != nil {
		t.Errorf("kafka.partitions = %v (present %v), want null", v, ok)
	}
}

func TestStatusTextSafeWAL(t *testing.T) {
	r := healthyStatus()
	r.Slot.SafeWALSizeBytes, r.Slot.SafeWALUnlimited = nil, true
	var buf bytes.Buffer
	_ = r.WriteText(&buf)
	if !strings.Contains(buf.String(), "safe WAL size: unlimited") {
		t.Fatalf("unlimited safe WAL size not shown:\n%s", buf.String())
	}
	r.Slot.WALStatus = ptr("lost")
	buf.Reset()
	_ = r.WriteText(&buf)
	if !strings.Contains(buf.String(), "safe WAL size: -\n") {
		t.Fatalf("lost slot shows a safe WAL size:\n%s", buf.String())
	}
}

func TestStatusBytes(t *testing.T) {
	for _, c := range []struct {
		n    *int64
		want string
	}{
		{nil, "-"},
		{ptr(int64(0)), "0 B"},
		{ptr(int64(1023)), "1023 B"},
		{ptr(int64(1536)), "1536 B (1.5 KiB)"},
		{ptr(int64(19087320)), "19087320 B (18.2 MiB)"},
		{ptr(int64(-2048)), "-2048 B (-2.0 KiB)"},
	} {
		if got := formatBytes(c.n); got != c.want {
			t.Errorf("formatBytes(%v) = %q, want %q", c.n, got, c.want)
		}
	}
}

func kafkaConfig(brokers []string, topic string) *config.Config {
	return &config.Config{Kafka: config.Kafka{Brokers: brokers, Topic: topic, ClientID: "walpost-test"}}
}

// TestStatusKafka reads partitions and end offsets from a fake cluster.
func TestStatusKafka(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "events"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("events"))
	if err != nil {
		t.Fatal(err)
	}
	per := map[int32]int{0: 2, 1: 0, 2: 5}
	for p, n := range per {
		for i := 0; i < n; i++ {
			if err := cl.ProduceSync(ctx, &kgo.Record{Partition: p}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	cl.Close()

	k := gatherKafka(ctx, kafkaConfig(c.ListenAddrs(), "events"), 10*time.Second)
	if k.Error != nil {
		t.Fatalf("error: %s", *k.Error)
	}
	if k.Partitions == nil || *k.Partitions != 3 {
		t.Fatalf("partitions = %v, want 3", k.Partitions)
	}
	if k.EndOffsetSum == nil || *k.EndOffsetSum != 7 {
		t.Fatalf("end offset sum = %v, want 7", k.EndOffsetSum)
	}
	for i, po := range k.EndOffsets {
		if po.Partition != int32(i) || po.EndOffset == nil || po.Error != nil {
			t.Fatalf("partition entry %d = %+v", i, po)
		}
	}

	missing := gatherKafka(ctx, kafkaConfig(c.ListenAddrs(), "nope"), 10*time.Second)
	if missing.Error == nil || !strings.Contains(*missing.Error, `topic "nope" does not exist`) || missing.Partitions != nil || missing.EndOffsets != nil {
		t.Fatalf("missing topic: %+v", missing)
	}
}

// TestStatusKafkaUnreachable: a broker nobody listens on is the Kafka
// section's error, within the timeout.
func TestStatusKafkaUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	start := time.Now()
	k := gatherKafka(context.Background(), kafkaConfig([]string{addr}, "events"), 2*time.Second)
	if k.Error == nil || !strings.Contains(*k.Error, "unreachable") || k.Partitions != nil || k.EndOffsetSum != nil {
		t.Fatalf("unreachable: %+v", k)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("took %s with a 2 s timeout", d)
	}
	none := gatherKafka(context.Background(), kafkaConfig(nil, "events"), time.Second)
	if none.Error == nil || !strings.Contains(*none.Error, "kafka.brokers") {
		t.Fatalf("no brokers: %+v", none)
	}
}
