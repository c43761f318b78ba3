package kafkaconf_test

import (
	"encoding/base64"
	"encoding/pem"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/kafkaconf"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

const avroOrder = `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"long"},{"name":"note","type":["null","string"],"default":null}]}`

// TestSchemaFrom: a format none is no framing (and no file is read); the
// key framing is schema_registry.key_format's; unreadable TLS files are
// errors naming their keys.
func TestSchemaFrom(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.pem")
	if s, err := kafkaconf.SchemaFrom(config.Schema{ValueFormat: config.SchemaNone, KeyFormat: config.SchemaAvro, URL: "http://registry:8081", TLSCAFile: missing}); s != nil || err != nil {
		t.Errorf("value_format none: %v, %v; want nil, nil", s, err)
	}
	if s, err := kafkaconf.KeySchemaFrom(config.Schema{KeyFormat: config.SchemaNone, ValueFormat: config.SchemaAvro, URL: "http://registry:8081", TLSCAFile: missing}); s != nil || err != nil {
		t.Errorf("key_format none: %v, %v; want nil, nil", s, err)
	}
	if s, err := kafkaconf.KeySchemaFrom(config.Schema{KeyFormat: config.SchemaAvro, URL: "http://registry:8081", Timeout: time.Second}); s == nil || err != nil {
		t.Errorf("key_format avro: %v, %v; want a framing", s, err)
	}
	for _, c := range []struct {
		schema config.Schema
		want   string
	}{
		{config.Schema{ValueFormat: config.SchemaAvro, TLSCAFile: missing}, "schema_registry.tls_ca_file: "},
		{config.Schema{ValueFormat: config.SchemaAvro, TLSCertFile: missing, TLSKeyFile: missing}, "schema_registry.tls_cert_file/tls_key_file: "},
	} {
		if _, err := kafkaconf.SchemaFrom(c.schema); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error starting %q", c.schema, err, c.want)
		}
	}
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := kafkaconf.SchemaFrom(config.Schema{ValueFormat: config.SchemaAvro, TLSCAFile: notPEM}); err == nil || err.Error() != "schema_registry.tls_ca_file "+notPEM+": no PEM certificate found" {
		t.Errorf("CA file without a certificate: %v", err)
	}
}

// The registry's TLS (a CA file) and basic auth (a password file read by
// ReadSecretFiles) reach the registry; wrong credentials are a destination
// failure that names the keys to check, never the row's.
func TestSchemaTLSAndBasicAuth(t *testing.T) {
	reg := srfake.New(srfake.WithAuth("Basic " + base64.StdEncoding.EncodeToString([]byte("walpost:s3cret"))))
	defer reg.Close()
	reg.SeedSchema("orders-value", 1, 7, sr.Schema{Schema: avroOrder, Type: sr.TypeAvro})
	srv := httptest.NewTLSServer(reg.Handler())
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	pw := filepath.Join(dir, "password")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	frame := func(password string) error {
		if err := os.WriteFile(pw, []byte(password+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		c := config.Config{Schema: config.Schema{ValueFormat: config.SchemaAvro, URL: srv.URL, SubjectStrategy: config.SubjectTopicName,
			Username: "walpost", PasswordFile: pw, TLSCAFile: ca, Timeout: 5 * time.Second, RefreshInterval: time.Minute}}
		if err := c.ReadSecretFiles(); err != nil {
			t.Fatal(err)
		}
		s, err := kafkaconf.SchemaFrom(c.Schema)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Frame("orders", "", nil, []byte(`{"id": 1, "note": null}`))
		return err
	}
	if err := frame("s3cret"); err != nil {
		t.Fatalf("over TLS with the password file: %v", err)
	}
	err := frame("wrong")
	if kind, _ := kafka.Classify(err); kind != sink.Destination || !strings.Contains(err.Error(), "schema_registry.password") {
		t.Fatalf("with a wrong password: %v (%v), want a destination failure naming schema_registry.password", err, kind)
	}
	// Without the CA the registry's certificate is not trusted.
	s, err := kafkaconf.SchemaFrom(config.Schema{ValueFormat: config.SchemaAvro, URL: srv.URL, SubjectStrategy: config.SubjectTopicName,
		Username: "walpost", Password: "s3cret", Timeout: 5 * time.Second, RefreshInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Frame("orders", "", nil, []byte(`{"id": 1, "note": null}`)); !errors.Is(err, kafka.ErrSchemaRegistry) {
		t.Fatalf("without schema_registry.tls_ca_file: %v, want ErrSchemaRegistry (untrusted certificate)", err)
	}
}
