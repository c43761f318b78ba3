package kafkaconf

import (
	"bytes"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/youmark/pkcs8"
	"software.sslmate.com/src/go-pkcs12"

	"github.com/walpost/walpost/config"
)

// clientCertificate is the client certificate of mutual TLS: from a
// PKCS#12 bundle (kafka.tls.keystore_file, its password
// kafka.tls.keystore_password), or from PEM files (kafka.tls.cert_file and
// key_file), the key possibly an encrypted PKCS#8 key
// (kafka.tls.key_password). ok is false when none is configured. An
// unreadable file, a wrong password or a key that does not match the
// certificate is an error naming the key to fix; a password never
// appears in it.
//
// Go's crypto/x509 decrypts neither PKCS#8 keys nor PKCS#12 bundles with
// modern ciphers: github.com/youmark/pkcs8 decrypts PKCS#8 (PBES2 with
// PBKDF2 or scrypt, AES or 3DES), software.sslmate.com/src/go-pkcs12 reads
// PKCS#12 (the frozen golang.org/x/crypto/pkcs12 reads neither AES-
// encrypted bundles, OpenSSL 3's default, nor chains).
func clientCertificate(t config.TLS) (tls.Certificate, bool, error) {
	switch {
	case t.KeystoreFile != "":
		c, err := keystoreCertificate(t.KeystoreFile, t.KeystorePassword)
		return c, err == nil, err
	case t.CertFile != "":
		c, err := pemCertificate(t.CertFile, t.KeyFile, t.KeyPassword)
		return c, err == nil, err
	}
	return tls.Certificate{}, false, nil
}

// keystoreCertificate reads a PKCS#12 bundle: the key, its certificate and
// the chain after it.
func keystoreCertificate(path, password string) (tls.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("kafka.tls.keystore_file: %w", err)
	}
	key, cert, chain, err := pkcs12.DecodeChain(b, password)
	if err != nil {
		if errors.Is(err, pkcs12.ErrIncorrectPassword) {
			return tls.Certificate{}, fmt.Errorf("kafka.tls.keystore_file %s: the password (kafka.tls.keystore_password) does not open it", path)
		}
		return tls.Certificate{}, fmt.Errorf("kafka.tls.keystore_file %s: not a PKCS#12 bundle of one key and its certificate: %w", path, err)
	}
	c := tls.Certificate{PrivateKey: key, Leaf: cert, Certificate: [][]byte{cert.Raw}}
	for _, ca := range chain {
		c.Certificate = append(c.Certificate, ca.Raw)
	}
	if err := matches(cert, key); err != nil {
		return tls.Certificate{}, fmt.Errorf("kafka.tls.keystore_file %s: %w", path, err)
	}
	return c, nil
}

// pemCertificate reads a PEM certificate (chain) and its PEM key: PKCS#1,
// SEC 1 or PKCS#8, or an encrypted PKCS#8 key opened with password.
func pemCertificate(certFile, keyFile, password string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("kafka.tls.cert_file: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("kafka.tls.key_file: %w", err)
	}
	block, _ := pem.Decode(keyPEM)
	switch {
	case block == nil:
		return tls.Certificate{}, fmt.Errorf("kafka.tls.key_file %s: no PEM key found", keyFile)
	case block.Type == "ENCRYPTED PRIVATE KEY":
		if password == "" {
			return tls.Certificate{}, fmt.Errorf("kafka.tls.key_file %s is an encrypted PKCS#8 key: set kafka.tls.key_password (or kafka.tls.key_password_file)", keyFile)
		}
		key, err := pkcs8.ParsePKCS8PrivateKey(block.Bytes, []byte(password))
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("kafka.tls.key_file %s: the password (kafka.tls.key_password) does not decrypt it, or it is not a PKCS#8 key: %w", keyFile, err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("kafka.tls.key_file %s: %w", keyFile, err)
		}
		keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	case bytes.Contains(keyPEM, []byte("Proc-Type: 4,ENCRYPTED")):
		return tls.Certificate{}, fmt.Errorf("kafka.tls.key_file %s is encrypted the legacy OpenSSL way (Proc-Type: 4,ENCRYPTED), which is insecure and not read: convert it to encrypted PKCS#8 with openssl pkcs8 -topk8 -in %s -out key.p8", keyFile, keyFile)
	case password != "":
		return tls.Certificate{}, fmt.Errorf("kafka.tls.key_password is set but kafka.tls.key_file %s is not encrypted (BEGIN %s): remove the password, or use the encrypted key", keyFile, block.Type)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("kafka.tls.cert_file/key_file: %w", err)
	}
	return c, nil
}

// matches checks that key is cert's private key.
func matches(cert *x509.Certificate, key any) error {
	pub, ok := key.(crypto.Signer)
	if !ok {
		return errors.New("its key is of an unsupported type")
	}
	eq, ok := pub.Public().(interface{ Equal(x crypto.PublicKey) bool })
	if !ok || !eq.Equal(cert.PublicKey) {
		return errors.New("its key is not the key of its certificate")
	}
	return nil
}
