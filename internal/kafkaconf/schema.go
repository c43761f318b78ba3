package kafkaconf

import (
	"crypto/tls"
	"fmt"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/sink/kafka"
)

// SchemaFrom is the value framing of the configuration's schema_registry
// keys; nil when schema_registry.value_format is none. An unreadable CA,
// certificate or key file is an error naming its key.
func SchemaFrom(c config.Schema) (*kafka.Schema, error) {
	return newSchema(c, c.ValueFormat, false)
}

// KeySchemaFrom is the key framing (schema_registry.key_format): the key
// text as a string value, framed with the latest schema of subject
// <topic>-key; nil when the key format is none.
func KeySchemaFrom(c config.Schema) (*kafka.Schema, error) {
	return newSchema(c, c.KeyFormat, true)
}

func newSchema(c config.Schema, format string, key bool) (*kafka.Schema, error) {
	if format == "" || format == config.SchemaNone {
		return nil, nil
	}
	o := kafka.SchemaOptions{Format: format, Key: key, URL: c.URL, Username: c.Username, Password: c.Password,
		SubjectStrategy: c.SubjectStrategy, SchemaIDHeader: c.SchemaIDHeader, Timeout: c.Timeout, RefreshInterval: c.RefreshInterval}
	if c.TLSCAFile != "" || c.TLSCertFile != "" {
		tc, err := registryTLS(c)
		if err != nil {
			return nil, err
		}
		o.TLS = tc
	}
	s, err := kafka.NewSchema(o)
	if err != nil {
		return nil, fmt.Errorf("schema_registry.url: %w", err)
	}
	return s, nil
}

// registryTLS is the TLS configuration of schema_registry.tls_*.
func registryTLS(c config.Schema) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.TLSCAFile != "" {
		pool, err := caPool("schema_registry.tls_ca_file", c.TLSCAFile)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	if c.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("schema_registry.tls_cert_file/tls_key_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
