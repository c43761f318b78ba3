package kafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/walpost/walpost/sink/kafka"
)

// mechanism is the SASL mechanism ClientOpts configures for s (kfake
// speaks only PLAIN and SCRAM, so the others are checked by the first
// message they send).
func mechanism(t *testing.T, s kafka.SASL) sasl.Mechanism {
	t.Helper()
	opts := kafka.ClientOpts(kafka.Connection{SASL: s})
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers("127.0.0.1:1"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ms, _ := cl.OptValue(kgo.SASL).([]sasl.Mechanism)
	if len(ms) != 1 {
		t.Fatalf("SASL mechanisms %v, want one", ms)
	}
	return ms[0]
}

// TestClientOptsOAuthBearer: OAUTHBEARER sends the token SASL.OAuthToken
// gives, asked again at every connection (a rotated token is sent by the
// next one); its error fails the connection.
func TestClientOptsOAuthBearer(t *testing.T) {
	first := func(m sasl.Mechanism) string {
		t.Helper()
		_, msg, err := m.Authenticate(context.Background(), "broker:9093")
		if err != nil {
			t.Fatal(err)
		}
		return string(msg)
	}
	tok, fail := "token-1", error(nil)
	m := mechanism(t, kafka.SASL{Mechanism: "oauthbearer", OAuthToken: func(context.Context) (string, error) { return tok, fail }})
	if m.Name() != "OAUTHBEARER" {
		t.Fatalf("mechanism %s", m.Name())
	}
	if msg := first(m); !strings.Contains(msg, "auth=Bearer token-1\x01") {
		t.Fatalf("initial message %q has no bearer token-1", msg)
	}
	tok = "token-2"
	if msg := first(m); !strings.Contains(msg, "auth=Bearer token-2\x01") {
		t.Fatalf("after the rotation the initial message %q has no bearer token-2", msg)
	}
	fail = errors.New("no token")
	if _, _, err := m.Authenticate(context.Background(), "broker:9093"); !errors.Is(err, fail) {
		t.Fatalf("failing token: err %v, want %v", err, fail)
	}
}

// TestClientOptsAWSMSKIAM: AWS_MSK_IAM signs with the configured
// credentials, else with AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/
// AWS_SESSION_TOKEN as the environment holds them at the connection, for
// the region in the broker's host name; never the secret itself.
func TestClientOptsAWSMSKIAM(t *testing.T) {
	const host = "b-1.walpost.abc123.c2.kafka.eu-west-1.amazonaws.com:9098"
	challenge := func(m sasl.Mechanism) map[string]string {
		t.Helper()
		_, msg, err := m.Authenticate(context.Background(), host)
		if err != nil {
			t.Fatal(err)
		}
		var kv map[string]string
		if err := json.Unmarshal(msg, &kv); err != nil {
			t.Fatalf("%v: %s", err, msg)
		}
		if strings.Contains(string(msg), "SECRET") {
			t.Fatalf("the challenge carries the secret key: %s", msg)
		}
		return kv
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAENVIRONMENT")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "ENVSECRET")
	t.Setenv("AWS_SESSION_TOKEN", "env-session")

	m := mechanism(t, kafka.SASL{Mechanism: "AWS_MSK_IAM", AWSAccessKeyID: "AKIACONFIG", AWSSecretAccessKey: "CONFIGSECRET"})
	if m.Name() != "AWS_MSK_IAM" {
		t.Fatalf("mechanism %s", m.Name())
	}
	kv := challenge(m)
	if c := kv["x-amz-credential"]; !strings.HasPrefix(c, "AKIACONFIG/") || !strings.Contains(c, "/eu-west-1/kafka-cluster/aws4_request") {
		t.Errorf("x-amz-credential %q: want the configured key for eu-west-1", c)
	}
	if _, ok := kv["x-amz-security-token"]; ok {
		t.Errorf("configured credentials without a session token sent one from the environment: %v", kv)
	}
	if kv["action"] != "kafka-cluster:Connect" || kv["x-amz-signature"] == "" || kv["user-agent"] != "walpost" {
		t.Errorf("challenge %v", kv)
	}

	m = mechanism(t, kafka.SASL{Mechanism: "AWS_MSK_IAM"})
	kv = challenge(m)
	if c := kv["x-amz-credential"]; !strings.HasPrefix(c, "AKIAENVIRONMENT/") {
		t.Errorf("x-amz-credential %q: want the environment's key", c)
	}
	if kv["x-amz-security-token"] != "env-session" {
		t.Errorf("x-amz-security-token %q, want env-session", kv["x-amz-security-token"])
	}
	// Rotated in the environment: the next connection signs with it.
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAROTATED")
	if c := challenge(m)["x-amz-credential"]; !strings.HasPrefix(c, "AKIAROTATED/") {
		t.Errorf("after rotation x-amz-credential %q", c)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	if _, _, err := m.Authenticate(context.Background(), host); err == nil || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") {
		t.Fatalf("no credentials: err %v", err)
	}
}
