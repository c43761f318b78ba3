package kafkaconf_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/kafkaconf"
	"github.com/walpost/walpost/sink/kafka"
)

// mechanism is the SASL mechanism ClientOpts configures for s.
func mechanism(t *testing.T, s config.SASL) sasl.Mechanism {
	t.Helper()
	opts, err := kafkaconf.ClientOpts(config.Kafka{SASL: s})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers("127.0.0.1:1"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ms, _ := cl.OptValue(kgo.SASL).([]sasl.Mechanism)
	if len(ms) != 1 {
		t.Fatalf("SASL mechanisms %v, want one", ms)
	}
	return ms[0]
}

// TestOAuthToken: OAUTHBEARER sends kafka.sasl.oauth_token as the bearer
// token; with oauth_token_file the file is read at every connection, so a
// rotated token is sent by the next one, and a missing file is an error
// naming the key.
func TestOAuthToken(t *testing.T) {
	first := func(m sasl.Mechanism) string {
		t.Helper()
		_, msg, err := m.Authenticate(context.Background(), "broker:9093")
		if err != nil {
			t.Fatal(err)
		}
		return string(msg)
	}
	m := mechanism(t, config.SASL{Mechanism: "oauthbearer", OAuthToken: "static-token"})
	if m.Name() != "OAUTHBEARER" {
		t.Fatalf("mechanism %s", m.Name())
	}
	if msg := first(m); !strings.Contains(msg, "auth=Bearer static-token\x01") {
		t.Fatalf("initial message %q has no bearer static-token", msg)
	}

	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("token-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m = mechanism(t, config.SASL{Mechanism: "OAUTHBEARER", OAuthToken: "token-1", OAuthTokenFile: file})
	if msg := first(m); !strings.Contains(msg, "auth=Bearer token-1\x01") {
		t.Fatalf("initial message %q has no bearer token-1", msg)
	}
	if err := os.WriteFile(file, []byte("token-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if msg := first(m); !strings.Contains(msg, "auth=Bearer token-2\x01") {
		t.Fatalf("after the rotation the initial message %q has no bearer token-2", msg)
	}
	if err := os.WriteFile(file, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Authenticate(context.Background(), "broker:9093"); err == nil || err.Error() != "kafka.sasl.oauth_token_file "+file+": the file is empty" {
		t.Fatalf("empty token file: err %v", err)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Authenticate(context.Background(), "broker:9093"); err == nil || !strings.Contains(err.Error(), "kafka.sasl.oauth_token_file") {
		t.Fatalf("missing token file: err %v, want one naming kafka.sasl.oauth_token_file", err)
	}
}

// TestConnection: the keys of kafka.* reach the connection.
func TestConnection(t *testing.T) {
	c, err := kafkaconf.Connection(config.Kafka{Brokers: []string{"b:9092"}, ClientID: "w", MetadataMaxAge: time.Minute, ClientRack: "az1",
		SASL: config.SASL{Mechanism: "AWS_MSK_IAM", AWSAccessKeyID: "AKIA", AWSSecretAccessKey: "S", AWSSessionToken: "T"}})
	if err != nil {
		t.Fatal(err)
	}
	if c.TLS != nil || len(c.Brokers) != 1 || c.Brokers[0] != "b:9092" || c.ClientID != "w" || c.MetadataMaxAge != time.Minute || c.ClientRack != "az1" ||
		c.SASL.Mechanism != "AWS_MSK_IAM" || c.SASL.AWSAccessKeyID != "AKIA" || c.SASL.AWSSecretAccessKey != "S" || c.SASL.AWSSessionToken != "T" {
		t.Errorf("connection %+v", c)
	}
	c, err = kafkaconf.Connection(config.Kafka{TLS: config.TLS{Enabled: true, ServerName: "broker"}})
	if err != nil || c.TLS == nil || c.TLS.ServerName != "broker" || c.TLS.MinVersion != 0x0303 {
		t.Errorf("TLS: %v, %+v", err, c.TLS)
	}
	if _, err := kafkaconf.Connection(config.Kafka{TLS: config.TLS{Enabled: true, CAFile: filepath.Join(t.TempDir(), "none.pem")}}); err == nil || !strings.HasPrefix(err.Error(), "kafka.tls.ca_file: ") {
		t.Errorf("missing CA file: %v", err)
	}
	if c, err := kafkaconf.Connection(config.Kafka{TLS: config.TLS{CAFile: filepath.Join(t.TempDir(), "none.pem")}}); err != nil || c.TLS != nil {
		t.Errorf("TLS disabled: %v, %+v (the files are not read)", err, c.TLS)
	}
}

// TestConstants: sink/kafka's names of partitioners, formats and registry
// settings are the configuration's values, which kafkaconf passes as they
// are.
func TestConstants(t *testing.T) {
	for _, c := range [][2]string{
		{config.PartitionerMurmur2, kafka.PartitionerMurmur2},
		{config.PartitionerConsistentRandom, kafka.PartitionerConsistentRandom},
		{config.PartitionerFNV1a, kafka.PartitionerFNV1a},
		{config.FormatString, kafka.FormatString},
		{config.FormatJSON, kafka.FormatJSON},
		{config.FormatJSONSchema, kafka.FormatJSONSchema},
		{config.RoutedByValue, kafka.RoutedByValue},
		{config.SchemaNone, kafka.SchemaNone},
		{config.SchemaAvro, kafka.SchemaAvro},
		{config.SchemaJSONSchema, kafka.SchemaJSONSchema},
		{config.SchemaProtobuf, kafka.SchemaProtobuf},
		{config.SubjectTopicName, kafka.SubjectTopicName},
		{config.SubjectRecordName, kafka.SubjectRecordName},
		{config.SubjectTopicRecordName, kafka.SubjectTopicRecordName},
	} {
		if c[0] != c[1] {
			t.Errorf("config %q, sink/kafka %q", c[0], c[1])
		}
	}
	if config.Default().Kafka.Partitioner != kafka.PartitionerMurmur2 {
		t.Fatalf("default kafka.partitioner %q, want murmur2", config.Default().Kafka.Partitioner)
	}
}

// TestProducerSettings: kafka.request_timeout, kafka.metadata_max_age and
// kafka.client_rack reach the producing client (and the last two every
// client), and the defaults are franz-go's own, so leaving them alone
// changes nothing. Mutation: dropping the ProduceRequestTimeout option
// (the client keeps 10s).
func TestProducerSettings(t *testing.T) {
	c := config.Default()
	c.Kafka.Brokers = []string{"127.0.0.1:1"}
	def, err := kafkaconf.ConfigFrom(c)
	if err != nil {
		t.Fatal(err)
	}
	k, err := kafka.New(def)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []any{kgo.ProduceRequestTimeout, kgo.MetadataMaxAge, kgo.Rack} {
		if got, want := k.Client().OptValue(o), plain.OptValue(o); got != want {
			t.Errorf("default %T: %v, franz-go's default %v", o, got, want)
		}
	}
	plain.Close()
	k.Close()

	c.Kafka.RequestTimeout, c.Kafka.MetadataMaxAge, c.Kafka.ClientRack = 45*time.Second, time.Minute, "use1-az2"
	kc, err := kafkaconf.ConfigFrom(c)
	if err != nil {
		t.Fatal(err)
	}
	k, err = kafka.New(kc)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	admin, err := kafkaconf.NewClient(c.Kafka)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, tc := range []struct {
		cl   *kgo.Client
		opt  any
		want any
	}{
		{k.Client(), kgo.ProduceRequestTimeout, 45 * time.Second},
		{k.Client(), kgo.MetadataMaxAge, time.Minute},
		{k.Client(), kgo.Rack, "use1-az2"},
		{admin, kgo.MetadataMaxAge, time.Minute},
		{admin, kgo.Rack, "use1-az2"},
	} {
		if got := tc.cl.OptValue(tc.opt); got != tc.want {
			t.Errorf("%T: %v, want %v", tc.opt, got, tc.want)
		}
	}
}
