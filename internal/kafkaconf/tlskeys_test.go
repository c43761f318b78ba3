package kafkaconf_test

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
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/youmark/pkcs8"
	"software.sslmate.com/src/go-pkcs12"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/kafkaconf"
)

// pki is a CA, a client certificate it signed, and the client's key,
// generated in-process.
type pki struct {
	caCert, clientCert *x509.Certificate
	clientKey          *ecdsa.PrivateKey
	caPool             *x509.CertPool
}

func newPKI(t *testing.T) pki {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "walpost test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "walpost-client"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return pki{caCert: caCert, clientCert: cert, clientKey: key, caPool: pool}
}

func writeFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// handshake connects through ClientOpts' dialer to a TLS server that
// requires a client certificate signed by p's CA, and returns the
// client certificate's common name the server saw.
func handshake(t *testing.T, p pki, c config.TLS) (string, error) {
	t.Helper()
	serverKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "broker"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &serverKey.PublicKey, serverKey)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: serverKey}},
		ClientAuth:   tls.RequireAndVerifyClientCert, ClientCAs: p.caPool, MinVersion: tls.VersionTLS12,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	seen := make(chan string, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			seen <- ""
			return
		}
		defer conn.Close()
		tc := conn.(*tls.Conn)
		if err := tc.Handshake(); err != nil || len(tc.ConnectionState().PeerCertificates) == 0 {
			seen <- ""
			return
		}
		seen <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
	}()
	c.Enabled, c.InsecureSkipVerify = true, true
	opts, err := kafkaconf.ClientOpts(config.Kafka{TLS: c})
	if err != nil {
		return "", err
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(ln.Addr().String()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	dial := cl.OptValue(kgo.Dialer).(func(context.Context, string, string) (net.Conn, error))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := dial(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	if err := conn.(*tls.Conn).HandshakeContext(ctx); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	return <-seen, nil
}

// TestClientCertificateFormats: the client certificate of mutual TLS
// comes from PEM files (a plain or an encrypted PKCS#8 key with
// kafka.tls.key_password) or from a PKCS#12 bundle with
// kafka.tls.keystore_password (modern AES and legacy 3DES encryption),
// each generated here; a broker that requires a client certificate
// signed by the CA accepts each. A wrong or missing password, a legacy
// OpenSSL-encrypted PEM key and a bundle whose password is wrong are
// errors naming the key to fix and never showing the password.
// Mutations: ignoring kafka.tls.key_password (the encrypted key is not
// read), dropping the keystore's key-matches-certificate check (a key of
// another certificate is accepted: the client's side of a TLS 1.3
// handshake does not notice).
func TestClientCertificateFormats(t *testing.T) {
	p := newPKI(t)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.clientCert.Raw})
	plainDER, err := x509.MarshalPKCS8PrivateKey(p.clientKey)
	if err != nil {
		t.Fatal(err)
	}
	const secret = "s3cret-Pa55"
	encDER, err := pkcs8.MarshalPrivateKey(p.clientKey, []byte(secret), nil)
	if err != nil {
		t.Fatal(err)
	}
	modern, err := pkcs12.Modern.Encode(p.clientKey, p.clientCert, []*x509.Certificate{p.caCert}, secret)
	if err != nil {
		t.Fatal(err)
	}
	legacy, err := pkcs12.LegacyDES.Encode(p.clientKey, p.clientCert, nil, secret)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	mismatched, err := pkcs12.Modern.Encode(other, p.clientCert, nil, secret)
	if err != nil {
		t.Fatal(err)
	}
	certFile := writeFile(t, "client.pem", certPEM)
	plainKey := writeFile(t, "key.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: plainDER}))
	encKey := writeFile(t, "key.p8", pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: encDER}))
	legacyPEM := writeFile(t, "legacy.pem", []byte("-----BEGIN EC PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00\n\nAAAA\n-----END EC PRIVATE KEY-----\n"))

	for _, c := range []struct {
		name string
		tls  config.TLS
		want string // "" accepted
	}{
		{"pem", config.TLS{CertFile: certFile, KeyFile: plainKey}, ""},
		{"encrypted pkcs8", config.TLS{CertFile: certFile, KeyFile: encKey, KeyPassword: secret}, ""},
		{"pkcs12 modern", config.TLS{KeystoreFile: writeFile(t, "c.p12", modern), KeystorePassword: secret}, ""},
		{"pkcs12 legacy", config.TLS{KeystoreFile: writeFile(t, "l.p12", legacy), KeystorePassword: secret}, ""},
		{"encrypted pkcs8 without password", config.TLS{CertFile: certFile, KeyFile: encKey}, "set kafka.tls.key_password"},
		{"encrypted pkcs8 wrong password", config.TLS{CertFile: certFile, KeyFile: encKey, KeyPassword: "wrong-pw"}, "kafka.tls.key_password) does not decrypt it"},
		{"password on a plain key", config.TLS{CertFile: certFile, KeyFile: plainKey, KeyPassword: "wrong-pw"}, "is not encrypted"},
		{"legacy encrypted pem", config.TLS{CertFile: certFile, KeyFile: legacyPEM, KeyPassword: "wrong-pw"}, "openssl pkcs8 -topk8"},
		{"pkcs12 wrong password", config.TLS{KeystoreFile: writeFile(t, "w.p12", modern), KeystorePassword: "wrong-pw"}, "kafka.tls.keystore_password) does not open it"},
		{"pkcs12 key of another certificate", config.TLS{KeystoreFile: writeFile(t, "m.p12", mismatched), KeystorePassword: secret}, "not the key of its certificate"},
		{"pkcs12 missing", config.TLS{KeystoreFile: filepath.Join(t.TempDir(), "none.p12")}, "kafka.tls.keystore_file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cn, err := handshake(t, p, c.tls)
			switch {
			case c.want == "" && (err != nil || cn != "walpost-client"):
				t.Errorf("the broker saw client certificate %q (%v), want walpost-client", cn, err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("%v, want an error with %q", err, c.want)
			case err != nil && (strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "wrong-pw")):
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}
