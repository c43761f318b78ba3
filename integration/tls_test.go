package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 (its own CA)
// and its key, PEM encoded.
func selfSigned(t testing.TB, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "walpost test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:              []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestPostgresTLS: walpost migrates, streams and forwards over a TLS
// connection verified against a self-signed CA (sslmode=verify-full), and
// refuses a server whose certificate it cannot verify.
func TestPostgresTLS(t *testing.T) {
	t.Parallel()
	needStack(t)
	srv := scratchServer(t, "logical")
	plainURL := srv.url
	dataDir := srv.data

	certFile, keyFile := selfSigned(t, t.TempDir())
	for _, f := range []string{certFile, keyFile} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dataDir, filepath.Base(f))
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			u, err := user.Lookup("postgres")
			if err != nil {
				t.Fatal(err)
			}
			uid, _ := strconv.Atoi(u.Uid)
			gid, _ := strconv.Atoi(u.Gid)
			if err := os.Chown(dst, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, plainURL)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`ALTER SYSTEM SET ssl = on`, `SELECT pg_reload_conf()`} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	admin.Close(ctx)

	tlsURL := strings.Replace(plainURL, "sslmode=disable", "sslmode=verify-full&sslrootcert="+certFile, 1)
	waitFor(t, 30*time.Second, "TLS on the scratch server", func() bool {
		c, err := pgx.Connect(ctx, tlsURL)
		if err != nil {
			return false
		}
		c.Close(ctx)
		return true
	})

	topic := randName("tls_topic")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	t.Cleanup(func() { _, _ = kadm.NewClient(cl).DeleteTopics(context.Background(), topic) })
	env := []string{"WALPOST_POSTGRES_URL=" + tlsURL, "WALPOST_KAFKA_BROKERS=" + strings.Join(brokers, ","),
		"WALPOST_KAFKA_TOPIC=" + topic, "WALPOST_KAFKA_CREATE_TOPIC_PARTITIONS=1", "WALPOST_HTTP_LISTEN="}
	if out, err := walpostOutput(t, env, "migrate"); err != nil {
		t.Fatalf("migrate over TLS: %v\n%s", err, out)
	}
	cmd := exec.Command(binary, "run")
	cmd.SysProcAttr = childAttr()
	cmd.Env = append(baseEnv(), env...)
	logf, err := os.CreateTemp(t.TempDir(), "walpost-tls-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	p := &proc{t: t, cmd: cmd, log: logf.Name(), done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatalf("walpost did not stream over TLS:\n%s", tail(p.log, 30))
	}
	conn, err := pgx.Connect(ctx, tlsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO outbox (idempotency_key, payload) VALUES ('tls-1', '{"secure": true}')`); err != nil {
		t.Fatal(err)
	}
	var sslSessions int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
		WHERE s.ssl AND a.backend_type = 'walsender'`).Scan(&sslSessions); err != nil {
		t.Fatal(err)
	}
	if sslSessions < 1 {
		t.Fatal("walpost's replication connection is not using TLS")
	}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var got string
	for got == "" && cctx.Err() == nil {
		consumer.PollFetches(cctx).EachRecord(func(r *kgo.Record) { got = string(r.Key) })
	}
	if got != "tls-1" {
		t.Fatalf("record over TLS: got key %q", got)
	}

	// A certificate walpost cannot verify: a clear error, no connection.
	otherCA, _ := selfSigned(t, t.TempDir())
	badURL := strings.Replace(plainURL, "sslmode=disable", "sslmode=verify-full&sslrootcert="+otherCA, 1)
	out2, err := walpostOutput(t, []string{"WALPOST_POSTGRES_URL=" + badURL, "WALPOST_KAFKA_BROKERS=" + strings.Join(brokers, ",")}, "migrate")
	if err == nil || !strings.Contains(out2, "certificate") {
		t.Fatalf("migrate with an unknown CA: err %v, output:\n%s", err, out2)
	}
	if strings.Contains(out2, "walpost:walpost@") {
		t.Fatalf("password not redacted:\n%s", out2)
	}
}
