// Package kafka is walpost's Kafka side built on franz-go: the connection
// options every Kafka client of walpost uses (TLS, SASL) and, in sink.go,
// the producing sink. It knows its own options only; internal/kafkaconf
// builds them from walpost's configuration.
package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/aws"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Connection is how a Kafka client of walpost reaches the brokers: the
// forwarder, check, status, verify and poison replay all connect with it.
type Connection struct {
	// Brokers are the seed brokers (host:port).
	Brokers []string
	// ClientID is the Kafka client.id.
	ClientID string
	// TLS, when not nil, connects over TLS with it (roots, client
	// certificate, server name as loaded by the caller); nil is plaintext.
	TLS *tls.Config
	// SASL authenticates to the brokers; the zero value is none.
	SASL SASL
	// MetadataMaxAge is franz-go's MetadataMaxAge; 0 leaves its default.
	MetadataMaxAge time.Duration
	// ClientRack is franz-go's Rack; "" is none.
	ClientRack string
}

// SASL is the SASL authentication of a Connection.
type SASL struct {
	// Mechanism is "" (none), PLAIN, SCRAM-SHA-256, SCRAM-SHA-512,
	// OAUTHBEARER or AWS_MSK_IAM, in any case.
	Mechanism string
	// Username and Password: PLAIN and SCRAM.
	Username, Password string
	// OAuthToken gives OAUTHBEARER's token at every connection (so a
	// token rotated where it is read is used from the next connection
	// on); nil sends an empty token.
	OAuthToken func(context.Context) (string, error)
	// Static AWS_MSK_IAM credentials; an empty access key id takes them
	// from the environment at every connection (awsCredentials).
	AWSAccessKeyID, AWSSecretAccessKey, AWSSessionToken string
}

// ClientOpts are the connection options of c (TLS, SASL, metadata age,
// rack) every Kafka client of walpost uses; the seed brokers and client id
// are NewClient's.
// SASL is PLAIN, SCRAM-SHA-256/512, OAUTHBEARER (the token SASL.OAuthToken
// gives at every connection) or AWS_MSK_IAM (static credentials, or the
// AWS_* environment; no AWS SDK, so no instance-profile or Pod Identity
// credentials).
func ClientOpts(c Connection) []kgo.Opt {
	var opts []kgo.Opt
	if c.TLS != nil {
		opts = append(opts, kgo.Dialer((&tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: c.TLS}).DialContext))
	}
	if c.MetadataMaxAge > 0 {
		opts = append(opts, kgo.MetadataMaxAge(c.MetadataMaxAge))
	}
	if c.ClientRack != "" {
		opts = append(opts, kgo.Rack(c.ClientRack))
	}
	s := c.SASL
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
	return opts
}

// oauthToken is the OAUTHBEARER token of each connection, as
// SASL.OAuthToken gives it then.
func oauthToken(s SASL) func(context.Context) (oauth.Auth, error) {
	return func(ctx context.Context) (oauth.Auth, error) {
		if s.OAuthToken == nil {
			return oauth.Auth{}, nil
		}
		tok, err := s.OAuthToken(ctx)
		if err != nil {
			return oauth.Auth{}, err
		}
		return oauth.Auth{Token: tok}, nil
	}
}

// awsCredentials are the AWS_MSK_IAM credentials of each connection:
// the SASL's static ones when the access key id is set, else
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN as the
// environment holds them at that connection, else a web identity
// (AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE: IRSA, a ServiceAccount's
// role) exchanged at STS. The request is signed for the region in the
// broker's host name, else AWS_REGION or AWS_DEFAULT_REGION (franz-go's
// sasl/aws).
func awsCredentials(s SASL) func(context.Context) (aws.Auth, error) {
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
func NewClient(c Connection, extra ...kgo.Opt) (*kgo.Client, error) {
	opts := append([]kgo.Opt{kgo.SeedBrokers(c.Brokers...), kgo.ClientID(c.ClientID)}, ClientOpts(c)...)
	return kgo.NewClient(append(opts, extra...)...)
}
