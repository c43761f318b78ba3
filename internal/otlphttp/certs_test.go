package otlphttp

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// selfSigned writes a self-signed client certificate and its key (PEM)
// into dir and returns their paths.
func selfSigned(t *testing.T, dir string) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "walpost"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// testCA writes a valid PEM certificate into dir and returns its path.
func testCA(t *testing.T, dir string) string {
	cert, _ := selfSigned(t, dir)
	return cert
}

// serverCA writes srv's certificate as PEM into dir and returns its path.
func serverCA(t *testing.T, srv *httptest.Server, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestClientCertificate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	pemBytes, err := os.ReadFile(cert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemBytes)
	rc := &receiver{}
	srv := httptest.NewUnstartedServer(rc)
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	srv.StartTLS()
	defer srv.Close()
	ca := serverCA(t, srv, dir)
	c := client(t, srv, map[string]string{
		"OTEL_EXPORTER_OTLP_CERTIFICATE":               ca,
		"OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE": cert,
		"OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY":         key,
	})
	if err := c.UploadTraces(context.Background(), spans()); err != nil {
		t.Fatalf("with the client certificate: %v", err)
	}
	if err := client(t, srv, map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": ca}).UploadTraces(context.Background(), spans()); err == nil {
		t.Fatal("without the client certificate: no error")
	}
}
