package verify

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/walpost/walpost/internal/leak"
)

// Every test of the package must leave no goroutine behind: kfake and the
// leak test's clients are all closed.
func TestMain(m *testing.M) {
	leak.VerifyTestMain(m)
}

// saslCluster is a kfake cluster that refuses clients without SASL PLAIN
// as u / p.
func saslCluster(t *testing.T) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "t"),
		kfake.EnableSASL(), kfake.Superuser("PLAIN", "u", "p"))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func saslOpt() kgo.Opt { return kgo.SASL(plain.Auth{User: "u", Pass: "p"}.AsMechanism()) }

// A broker that requires SASL: without KafkaOpts the run stops at Kafka;
// with them it gets past Kafka (end offsets read) to PostgreSQL, which
// here does not exist.
func TestLeakTestKafkaOptsReachTheBroker(t *testing.T) {
	c := saslCluster(t)
	newTest := func(opts ...kgo.Opt) *LeakTest {
		return &LeakTest{PostgresURL: "postgres://walpost@127.0.0.1:1/walpost?connect_timeout=2", Brokers: c.ListenAddrs(), Topic: "t",
			Events: 1, Writers: 1, MaxTxnSize: 1, Timeout: time.Second, KafkaOpts: opts}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := newTest().Run(ctx)
	if err == nil || !strings.HasPrefix(err.Error(), "kafka") {
		t.Fatalf("without KafkaOpts: %v, want a kafka error", err)
	}
	t.Logf("without KafkaOpts: %v", err)

	_, err = newTest(saslOpt()).Run(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), "postgres") {
		t.Fatalf("with KafkaOpts: %v, want a postgres error", err)
	}
	t.Logf("with KafkaOpts: %v", err)
}

// KafkaOpts come after the seed brokers and the client id and before the
// client's own options.
func TestLeakTestKafkaOptsOrder(t *testing.T) {
	c := saslCluster(t)
	l := &LeakTest{Brokers: c.ListenAddrs(), KafkaOpts: []kgo.Opt{saslOpt(), kgo.ClientID("mine"), kgo.FetchMaxWait(5 * time.Second)}}
	cl, err := l.kafkaClient("walpost-verify", kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if id := cl.OptValue(kgo.ClientID); id != "mine" {
		t.Errorf("client id %v, want KafkaOpts' mine", id)
	}
	if w := cl.OptValue(kgo.FetchMaxWait); w != 100*time.Millisecond {
		t.Errorf("fetch max wait %v, want the client's own 100ms", w)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cl.Ping(ctx); err != nil {
		t.Fatalf("ping with SASL from KafkaOpts: %v", err)
	}
}
