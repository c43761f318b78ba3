package integration

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// The SASL users of secureKafka.
const (
	plainUser, plainPass = "walpost-plain", "plain-secret"
	scramUser, scramPass = "walpost-scram", "scram-secret"
)

// secureKafka is a scratch broker (scripts/stack.sh scratch-kafka-up) with,
// besides its PLAINTEXT listener, an SSL listener (a self-signed
// certificate for 127.0.0.1, no client certificate) and a SASL_PLAINTEXT
// listener taking PLAIN and SCRAM-SHA-512. Each listener advertises
// itself, so a client bootstrapped on one never uses another.
type secureKafka struct {
	Plain  string // bootstrap address of each listener
	TLS    string
	SASL   string
	CAFile string // PEM CA of the SSL listener
	log    string
}

func startSecureKafka(t *testing.T) *secureKafka {
	t.Helper()
	needStack(t)
	var ports []int
	for len(ports) < 4 {
		p := freePort(t)
		if !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	plainPort, ctrlPort, tlsPort, saslPort := ports[0], ports[1], ports[2], ports[3]
	dir := t.TempDir()
	certFile, keyFile := selfSigned(t, dir)
	keystore := filepath.Join(dir, "keystore.pem")
	writeKeystore(t, certFile, keyFile, keystore)

	props := filepath.Join(dir, "security.properties")
	text := fmt.Sprintf(`listeners=PLAINTEXT://127.0.0.1:%[1]d,CONTROLLER://127.0.0.1:%[2]d,SSL://127.0.0.1:%[3]d,SASL_PLAINTEXT://127.0.0.1:%[4]d
advertised.listeners=PLAINTEXT://127.0.0.1:%[1]d,SSL://127.0.0.1:%[3]d,SASL_PLAINTEXT://127.0.0.1:%[4]d
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT
ssl.keystore.type=PEM
ssl.keystore.location=%[5]s
ssl.client.auth=none
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512
listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_%[6]s="%[7]s";
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
`, plainPort, ctrlPort, tlsPort, saslPort, keystore, plainUser, plainPass)
	if err := os.WriteFile(props, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}

	name := randName("kafka_sec")
	k := &secureKafka{
		Plain: fmt.Sprintf("127.0.0.1:%d", plainPort), TLS: fmt.Sprintf("127.0.0.1:%d", tlsPort),
		SASL: fmt.Sprintf("127.0.0.1:%d", saslPort), CAFile: certFile,
		log: filepath.Join(stackDir(), "scratch-kafka", name, "kafka.log"),
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("scratch broker log %s:\n%s", k.log, tail(k.log, 60))
		}
		_, _ = stackScript(nil, "scratch-kafka-down", name)
	})
	if out, err := stackScript(nil, "scratch-kafka-up", name, fmt.Sprint(plainPort), fmt.Sprint(ctrlPort), props); err != nil {
		t.Fatalf("scratch-kafka-up: %v\n%s", err, out)
	}

	// The SCRAM user, through the PLAINTEXT listener; the broker learns it
	// from the metadata log, so wait until it can log in.
	adm, err := kgo.NewClient(kgo.SeedBrokers(k.Plain))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := kadm.NewClient(adm).AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{
		{User: scramUser, Mechanism: kadm.ScramSha512, Iterations: 4096, Password: scramPass}})
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatalf("create SCRAM user: %v", err)
	}
	waitFor(t, 30*time.Second, "the SCRAM user to log in", func() bool {
		cl, err := kgo.NewClient(kgo.SeedBrokers(k.SASL),
			kgo.SASL(scram.Auth{User: scramUser, Pass: scramPass}.AsSha512Mechanism()))
		if err != nil {
			return false
		}
		defer cl.Close()
		pctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return cl.Ping(pctx) == nil
	})
	return k
}

// writeKeystore writes the PEM keystore Kafka reads (ssl.keystore.type=PEM):
// the key unencrypted in PKCS #8, then the certificate.
func writeKeystore(t testing.TB, certFile, keyFile, out string) {
	t.Helper()
	kb, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(kb)
	if block == nil {
		t.Fatalf("%s: no PEM block", keyFile)
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	p8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	b := append(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}), cert...)
	if err := os.WriteFile(out, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyOverKafkaTLSAndSASL: `walpost run` and `walpost verify`,
// configured only through WALPOST_* variables, reach a broker that speaks
// only TLS, or only SASL (PLAIN, SCRAM-SHA-512), on the listener they are
// given; verify reports every event delivered. Without the kafka.tls.* or
// kafka.sasl.* settings verify cannot connect.
func TestVerifyOverKafkaTLSAndSASL(t *testing.T) {
	t.Parallel()
	k := startSecureKafka(t)
	for _, c := range []struct {
		name    string
		brokers string
		env     []string
	}{
		{"tls", k.TLS, []string{"WALPOST_KAFKA_TLS_ENABLED=true", "WALPOST_KAFKA_TLS_CA_FILE=" + k.CAFile}},
		{"sasl_plain", k.SASL, []string{"WALPOST_KAFKA_SASL_MECHANISM=PLAIN",
			"WALPOST_KAFKA_SASL_USERNAME=" + plainUser, "WALPOST_KAFKA_SASL_PASSWORD=" + plainPass}},
		{"sasl_scram_sha_512", k.SASL, []string{"WALPOST_KAFKA_SASL_MECHANISM=SCRAM-SHA-512",
			"WALPOST_KAFKA_SASL_USERNAME=" + scramUser, "WALPOST_KAFKA_SASL_PASSWORD=" + scramPass}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// PostgreSQL side from the fixture; its topic on the main broker
			// goes unused: walpost run creates the topic on the scratch one.
			f := newFixture(t, fixtureOpts{partitions: 1})
			env := append([]string{"WALPOST_KAFKA_BROKERS=" + c.brokers, "WALPOST_KAFKA_CREATE_TOPIC_PARTITIONS=3"}, c.env...)
			p := f.start(env...)
			if !p.waitLog("msg=streaming", 60*time.Second) {
				t.Fatal("walpost run did not start streaming")
			}
			// The listener takes nothing else: without the settings verify
			// cannot run (exit 2), and writes nothing.
			out, err := walpostOutput(t, f.env("WALPOST_KAFKA_BROKERS="+c.brokers), "verify", "--events", "10", "--timeout", "5s")
			if code := exitCode(err); code != 2 || !strings.Contains(out, "kafka") {
				t.Fatalf("walpost verify without the %s settings exited %d (%v), want 2:\n%s", c.name, code, err, out)
			}

			out, err = walpostOutput(t, f.env(env...), "verify", "--events", "500", "--timeout", "60s", "--json")
			if code := exitCode(err); code != 0 {
				t.Fatalf("walpost verify exited %d (%v), want 0:\n%s", code, err, out)
			}
			var rep struct {
				OK         bool `json:"ok"`
				Written    int  `json:"written"`
				Delivered  int  `json:"delivered"`
				Lost       int  `json:"lost"`
				OutOfOrder int  `json:"out_of_order"`
				Partitions []struct {
					Partition int32 `json:"partition"`
				} `json:"partitions"`
			}
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("%v:\n%s", err, out)
			}
			if !rep.OK || rep.Written != 500 || rep.Delivered != 500 || rep.Lost != 0 || rep.OutOfOrder != 0 || len(rep.Partitions) != 3 {
				t.Fatalf("report: %+v\n%s", rep, out)
			}
		})
	}
}
