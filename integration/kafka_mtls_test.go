package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/youmark/pkcs8"
	"software.sslmate.com/src/go-pkcs12"
)

// TestKafkaMutualTLSKeystore: a broker whose SSL listener requires a
// client certificate of its CA (ssl.client.auth=required) takes walpost's
// certificate from a PKCS#12 bundle (kafka.tls.keystore_file,
// kafka.tls.keystore_password) and from an encrypted PKCS#8 key
// (kafka.tls.key_password_file): walpost check's kafka line is OK with
// each and FAIL without a client certificate. Mutation: ClientOpts
// without the client certificate (every variant fails). It starts a broker
// of its own (a JVM beside the stack's, over a minute on a loaded 2-core
// machine): only with WALPOST_ACCEPTANCE=1; make test loads the keys and
// bundles in process (sink/kafka's TestClientCertificateFormats).
func TestKafkaMutualTLSKeystore(t *testing.T) {
	if os.Getenv("WALPOST_ACCEPTANCE") != "1" {
		t.Skip("starts a broker of its own: set WALPOST_ACCEPTANCE=1")
	}
	t.Parallel()
	needStack(t)
	var ports []int
	for len(ports) < 3 {
		if p := freePort(t); !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	plainPort, ctrlPort, tlsPort := ports[0], ports[1], ports[2]
	dir := t.TempDir()
	caFile, caKeyFile := selfSigned(t, dir) // the broker's certificate, also the CA of the client's
	serverKeystore := filepath.Join(dir, "keystore.pem")
	writeKeystore(t, caFile, caKeyFile, serverKeystore)
	props := filepath.Join(dir, "mtls.properties")
	text := fmt.Sprintf(`listeners=PLAINTEXT://127.0.0.1:%[1]d,CONTROLLER://127.0.0.1:%[2]d,SSL://127.0.0.1:%[3]d
advertised.listeners=PLAINTEXT://127.0.0.1:%[1]d,SSL://127.0.0.1:%[3]d
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL
ssl.keystore.type=PEM
ssl.keystore.location=%[4]s
ssl.truststore.type=PEM
ssl.truststore.location=%[5]s
ssl.client.auth=required
`, plainPort, ctrlPort, tlsPort, serverKeystore, caFile)
	if err := os.WriteFile(props, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	name := randName("kafka_mtls")
	logFile := filepath.Join(stackDir(), "scratch-kafka", name, "kafka.log")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("scratch broker log %s:\n%s", logFile, tail(logFile, 60))
		}
		_, _ = stackScript(nil, "scratch-kafka-down", name)
	})
	if out, err := stackScript(nil, "scratch-kafka-up", name, fmt.Sprint(plainPort), fmt.Sprint(ctrlPort), props); err != nil {
		t.Fatalf("scratch-kafka-up: %v\n%s", err, out)
	}

	// The client certificate, signed by the CA, as a PKCS#12 bundle and as
	// PEM with an encrypted PKCS#8 key.
	ca, caKey := readCA(t, caFile, caKeyFile)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "walpost-client"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	const password = "keystore-pass"
	p12, err := pkcs12.Modern.Encode(key, cert, []*x509.Certificate{ca}, password)
	if err != nil {
		t.Fatal(err)
	}
	encKey, err := pkcs8.MarshalPrivateKey(key, []byte(password), nil)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p12File := write("client.p12", p12)
	certFile := write("client.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	keyFile := write("client.p8", pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: encKey}))
	passFile := write("key-password", []byte(password+"\n"))

	// PostgreSQL from a fixture; the topic on the scratch broker.
	f := newFixture(t, fixtureOpts{partitions: 1})
	cl, err := kgo.NewClient(kgo.SeedBrokers(fmt.Sprintf("127.0.0.1:%d", plainPort)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, f.Topic); err != nil {
		t.Fatal(err)
	}
	base := []string{"WALPOST_KAFKA_BROKERS=" + fmt.Sprintf("127.0.0.1:%d", tlsPort), "WALPOST_KAFKA_TLS_ENABLED=true", "WALPOST_KAFKA_TLS_CA_FILE=" + caFile}
	kafkaLine := regexp.MustCompile(`(?m)^(OK|FAIL|WARN|SKIP) +kafka .*$`)
	for _, c := range []struct {
		name, want string
		env        []string
	}{
		{"no client certificate", "FAIL", nil},
		{"pkcs12 keystore", "OK", []string{"WALPOST_KAFKA_TLS_KEYSTORE_FILE=" + p12File, "WALPOST_KAFKA_TLS_KEYSTORE_PASSWORD=" + password}},
		{"encrypted pkcs8 key", "OK", []string{"WALPOST_KAFKA_TLS_CERT_FILE=" + certFile, "WALPOST_KAFKA_TLS_KEY_FILE=" + keyFile, "WALPOST_KAFKA_TLS_KEY_PASSWORD_FILE=" + passFile}},
	} {
		out, _ := walpostOutput(t, f.env(append(slices.Clone(base), c.env...)...), "check")
		line := kafkaLine.FindString(out)
		if len(line) < len(c.want) || line[:len(c.want)] != c.want {
			t.Errorf("%s: walpost check's kafka line %q, want %s:\n%s", c.name, line, c.want, out)
		} else {
			t.Logf("%s: %s", c.name, line)
		}
	}
}

// readCA reads selfSigned's certificate and EC key.
func readCA(t *testing.T, certFile, keyFile string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	cb, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	cblock, _ := pem.Decode(cb)
	kblock, _ := pem.Decode(kb)
	if cblock == nil || kblock == nil {
		t.Fatal("selfSigned wrote no PEM")
	}
	cert, err := x509.ParseCertificate(cblock.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	key, err := x509.ParseECPrivateKey(kblock.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}
