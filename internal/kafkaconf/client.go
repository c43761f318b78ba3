package kafkaconf

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/sink/kafka"
)

// Connection is the connection of cfg every Kafka client of walpost uses:
// the forwarder, check, status, verify and poison replay. An unreadable
// CA, certificate or key file is an error naming its key. SASL is PLAIN,
// SCRAM-SHA-256/512, OAUTHBEARER (a static token, or one read from its
// file at every connection) or AWS_MSK_IAM (static credentials from the
// config or the AWS_* environment; no AWS SDK, so no instance-profile or
// Pod Identity credentials).
func Connection(cfg config.Kafka) (kafka.Connection, error) {
	c := kafka.Connection{
		Brokers:        cfg.Brokers,
		ClientID:       cfg.ClientID,
		MetadataMaxAge: cfg.MetadataMaxAge,
		ClientRack:     cfg.ClientRack,
		SASL: kafka.SASL{
			Mechanism: cfg.SASL.Mechanism,
			Username:  cfg.SASL.Username, Password: cfg.SASL.Password,
			OAuthToken:     oauthToken(cfg.SASL),
			AWSAccessKeyID: cfg.SASL.AWSAccessKeyID, AWSSecretAccessKey: cfg.SASL.AWSSecretAccessKey, AWSSessionToken: cfg.SASL.AWSSessionToken,
		},
	}
	if cfg.TLS.Enabled {
		tc, err := tlsConfig(cfg.TLS)
		if err != nil {
			return kafka.Connection{}, err
		}
		c.TLS = tc
	}
	return c, nil
}

// ClientOpts are kafka.ClientOpts of Connection(cfg): TLS, SASL, metadata
// age and rack.
func ClientOpts(cfg config.Kafka) ([]kgo.Opt, error) {
	c, err := Connection(cfg)
	if err != nil {
		return nil, err
	}
	return kafka.ClientOpts(c), nil
}

// NewClient is kafka.NewClient of Connection(cfg): a plain client for
// admin requests and consumers; extra options come last.
func NewClient(cfg config.Kafka, extra ...kgo.Opt) (*kgo.Client, error) {
	c, err := Connection(cfg)
	if err != nil {
		return nil, err
	}
	return kafka.NewClient(c, extra...)
}

// caPool reads the PEM certificates of file, the value of the setting
// key (named in its errors).
func caPool(key, file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s %s: no PEM certificate found", key, file)
	}
	return pool, nil
}

// tlsConfig is the TLS configuration of kafka.tls.*: the CA of ca_file
// (else the system roots) and the client certificate of
// clientCertificate.
func tlsConfig(t config.TLS) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // opt-in, documented as testing only
	if t.CAFile != "" {
		pool, err := caPool("kafka.tls.ca_file", t.CAFile)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	cert, ok, err := clientCertificate(t)
	if err != nil {
		return nil, err
	}
	if ok {
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// oauthToken is the OAUTHBEARER token of each connection: the file of
// kafka.sasl.oauth_token_file read again (a token a sidecar rotates there is
// used from the next connection on), else kafka.sasl.oauth_token.
func oauthToken(s config.SASL) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		if s.OAuthTokenFile == "" {
			return s.OAuthToken, nil
		}
		b, err := os.ReadFile(s.OAuthTokenFile)
		if err != nil {
			return "", fmt.Errorf("kafka.sasl.oauth_token_file: %w", err)
		}
		tok := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		if tok == "" {
			return "", fmt.Errorf("kafka.sasl.oauth_token_file %s: the file is empty", s.OAuthTokenFile)
		}
		return tok, nil
	}
}

// ConfigFrom is the producer configuration of walpost's configuration:
// brokers, default topic, client id, linger, compression, partitioner,
// request timeout, size limit, the TLS/SASL options, the schema registry
// framing (SchemaFrom, KeySchemaFrom), the record layout (LayoutFrom),
// and a client buffer above the pipeline's in-flight bound so Produce
// never blocks. Callers add Logger, OnDataLoss and ProducerOpts.
func ConfigFrom(c *config.Config) (kafka.Config, error) {
	opts, err := ClientOpts(c.Kafka)
	if err != nil {
		return kafka.Config{}, err
	}
	schema, err := SchemaFrom(c.Schema)
	if err != nil {
		return kafka.Config{}, err
	}
	keySchema, err := KeySchemaFrom(c.Schema)
	if err != nil {
		return kafka.Config{}, err
	}
	return kafka.Config{
		Schema:             schema,
		KeySchema:          keySchema,
		Brokers:            c.Kafka.Brokers,
		DefaultTopic:       c.Kafka.Topic,
		ClientID:           c.Kafka.ClientID,
		Linger:             c.Kafka.Linger,
		Compression:        c.Kafka.Compression,
		Partitioner:        c.Kafka.Partitioner,
		RequestTimeout:     c.Kafka.RequestTimeout,
		MaxMessageBytes:    c.Kafka.MaxMessageBytes,
		MaxBufferedRecords: c.Pipeline.MaxInFlightEvents + bufferHeadroom,
		Layout:             LayoutFrom(c.Mapping),
		Opts:               opts,
	}, nil
}

// bufferHeadroom is how many records the client buffers beyond the
// pipeline's in-flight bound (held events released after a failure are
// produced while the failed ones are still counted).
const bufferHeadroom = 1024
