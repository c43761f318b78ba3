// Package kafka is walpost's Kafka side built on franz-go: the connection
// options every Kafka client of walpost uses (TLS, SASL) and, in sink.go,
// the producing sink.
package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/aws"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/walpost/walpost/config"
)

// ClientOpts are the connection options (TLS, SASL, metadata age, rack)
// every Kafka client of walpost uses: the forwarder, check, status, verify and poison replay. An
// unreadable CA, certificate or key file is an error naming its key.
// SASL is PLAIN, SCRAM-SHA-256/512, OAUTHBEARER (a static token, or one
// read from its file at every connection) or AWS_MSK_IAM (static
// credentials from the config or the AWS_* environment; no AWS SDK, so no
// instance-profile, IRSA or Pod Identity credentials).
func ClientOpts(cfg config.Kafka) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	t := cfg.TLS
	if t.Enabled {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // opt-in, documented as testing only
		if t.CAFile != "" {
			pem, err := os.ReadFile(t.CAFile)
			if err != nil {
				return nil, fmt.Errorf("kafka.tls.ca_file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("kafka.tls.ca_file %s: no PEM certificate found", t.CAFile)
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
		opts = append(opts, kgo.Dialer((&tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: tc}).DialContext))
	}
	if cfg.MetadataMaxAge > 0 {
		opts = append(opts, kgo.MetadataMaxAge(cfg.MetadataMaxAge))
	}
	if cfg.ClientRack != "" {
		opts = append(opts, kgo.Rack(cfg.ClientRack))
	}
	s := cfg.SASL
	switch strings.ToUpper(s.Mechanism) {
	case "":
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism()))
	case "OAUTHBEARER":
		opts = append(opts, kgo.SASL(oauth.Oauth(oauthToken(s))))
	case "AWS_MSK_IAM":
		opts = append(opts, kgo.SASL(aws.ManagedStreamingIAM(awsCredentials(s))))
	}
	return opts, nil
}

// oauthToken is the OAUTHBEARER token of each connection: the file of
// kafka.sasl.oauth_token_file read again (a token a sidecar rotates there is
// used from the next connection on), else kafka.sasl.oauth_token.
func oauthToken(s config.SASL) func(context.Context) (oauth.Auth, error) {
	return func(context.Context) (oauth.Auth, error) {
		if s.OAuthTokenFile == "" {
			return oauth.Auth{Token: s.OAuthToken}, nil
		}
		b, err := os.ReadFile(s.OAuthTokenFile)
		if err != nil {
			return oauth.Auth{}, fmt.Errorf("kafka.sasl.oauth_token_file: %w", err)
		}
		tok := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		if tok == "" {
			return oauth.Auth{}, fmt.Errorf("kafka.sasl.oauth_token_file %s: the file is empty", s.OAuthTokenFile)
		}
		return oauth.Auth{Token: tok}, nil
	}
}

// awsCredentials are the AWS_MSK_IAM credentials of each connection:
// kafka.sasl.aws_* when the access key id is set, else AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN as the environment holds them
// at that connection, else a web identity (AWS_ROLE_ARN and
// AWS_WEB_IDENTITY_TOKEN_FILE: IRSA, a ServiceAccount's role) exchanged at
// STS. The request is signed for the region in the broker's host name,
// else AWS_REGION or AWS_DEFAULT_REGION (franz-go's sasl/aws).
func awsCredentials(s config.SASL) func(context.Context) (aws.Auth, error) {
	web := webIdentityFromEnv()
	return func(ctx context.Context) (aws.Auth, error) {
		a := aws.Auth{AccessKey: s.AWSAccessKeyID, SecretKey: s.AWSSecretAccessKey, SessionToken: s.AWSSessionToken, UserAgent: "walpost"}
		if a.AccessKey == "" {
			a = aws.Auth{AccessKey: os.Getenv("AWS_ACCESS_KEY_ID"), SecretKey: os.Getenv("AWS_SECRET_ACCESS_KEY"), SessionToken: os.Getenv("AWS_SESSION_TOKEN"), UserAgent: "walpost"}
		}
		if (a.AccessKey == "" || a.SecretKey == "") && web != nil {
			return web.auth(ctx)
		}
		if a.AccessKey == "" || a.SecretKey == "" {
			return aws.Auth{}, errors.New("AWS_MSK_IAM: no credentials: set kafka.sasl.aws_access_key_id and kafka.sasl.aws_secret_access_key, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE (a ServiceAccount's role)")
		}
		return a, nil
	}
}

// NewClient is a plain client (seed brokers, client id, ClientOpts) for
// admin requests and consumers; extra options come last.
func NewClient(cfg config.Kafka, extra ...kgo.Opt) (*kgo.Client, error) {
	opts, err := ClientOpts(cfg)
	if err != nil {
		return nil, err
	}
	opts = append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...), kgo.ClientID(cfg.ClientID)}, opts...)
	return kgo.NewClient(append(opts, extra...)...)
}

// ConfigFrom is the producer configuration of walpost's configuration:
// brokers, default topic, client id, linger, compression, partitioner,
// request timeout, size limit, the TLS/SASL options, the schema registry
// framing (SchemaFrom), and a client buffer above the pipeline's
// in-flight bound so Produce never blocks. Callers add Logger, OnDataLoss
// and ProducerOpts.
func ConfigFrom(c *config.Config) (Config, error) {
	opts, err := ClientOpts(c.Kafka)
	if err != nil {
		return Config{}, err
	}
	schema, err := SchemaFrom(c.Schema)
	if err != nil {
		return Config{}, err
	}
	keySchema, err := KeySchemaFrom(c.Schema)
	if err != nil {
		return Config{}, err
	}
	return Config{
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
