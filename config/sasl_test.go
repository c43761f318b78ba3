package config

import (
	"strings"
	"testing"
)

// TestConfigSASLMechanisms: OAUTHBEARER needs a token (or its file);
// AWS_MSK_IAM needs TLS and credentials, from kafka.sasl.aws_* or the
// AWS_* environment; any other mechanism is refused with the list.
func TestConfigSASLMechanisms(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	iam := with(minimalEnv, "WALPOST_KAFKA_SASL_MECHANISM", "AWS_MSK_IAM", "WALPOST_KAFKA_TLS_ENABLED", "true")
	for _, tt := range []struct {
		name   string
		env    map[string]string
		awsEnv bool     // AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY set
		want   []string // empty: accepted
	}{
		{name: "unknown mechanism", env: with(minimalEnv, "WALPOST_KAFKA_SASL_MECHANISM", "GSSAPI"),
			want: []string{"kafka.sasl.mechanism", "OAUTHBEARER or AWS_MSK_IAM"}},
		{name: "oauthbearer without token", env: with(minimalEnv, "WALPOST_KAFKA_SASL_MECHANISM", "OAUTHBEARER"),
			want: []string{"kafka.sasl.oauth_token", "WALPOST_KAFKA_SASL_OAUTH_TOKEN"}},
		{name: "oauthbearer with token", env: with(minimalEnv, "WALPOST_KAFKA_SASL_MECHANISM", "oauthbearer", "WALPOST_KAFKA_SASL_OAUTH_TOKEN", "tok")},
		{name: "oauthbearer with token file", env: with(minimalEnv, "WALPOST_KAFKA_SASL_MECHANISM", "OAUTHBEARER", "WALPOST_KAFKA_SASL_OAUTH_TOKEN_FILE", secretFile(t, "tok", "tok\n"))},
		{name: "oauth token and its file", env: with(minimalEnv, "WALPOST_KAFKA_SASL_MECHANISM", "OAUTHBEARER", "WALPOST_KAFKA_SASL_OAUTH_TOKEN", "tok", "WALPOST_KAFKA_SASL_OAUTH_TOKEN_FILE", secretFile(t, "tok2", "tok\n")),
			want: []string{"kafka.sasl.oauth_token (WALPOST_KAFKA_SASL_OAUTH_TOKEN)", "both set"}},
		{name: "aws without tls", env: with(iam, "WALPOST_KAFKA_TLS_ENABLED", "false"), awsEnv: true,
			want: []string{"kafka.tls.enabled", "AWS_MSK_IAM"}},
		{name: "aws without any credentials", env: iam,
			want: []string{"kafka.sasl.aws_access_key_id", "AWS_ACCESS_KEY_ID"}},
		{name: "aws from the environment", env: iam, awsEnv: true},
		{name: "aws key id without secret", env: with(iam, "WALPOST_KAFKA_SASL_AWS_ACCESS_KEY_ID", "AKIA"), awsEnv: true,
			want: []string{"kafka.sasl.aws_secret_access_key"}},
		{name: "aws secret without key id", env: with(iam, "WALPOST_KAFKA_SASL_AWS_SECRET_ACCESS_KEY", "s"), awsEnv: true,
			want: []string{"kafka.sasl.aws_access_key_id"}},
		{name: "aws from the config", env: with(iam, "WALPOST_KAFKA_SASL_AWS_ACCESS_KEY_ID", "AKIA", "WALPOST_KAFKA_SASL_AWS_SECRET_ACCESS_KEY", "s", "WALPOST_KAFKA_SASL_AWS_SESSION_TOKEN", "st")},
		{name: "aws secret from its file", env: with(iam, "WALPOST_KAFKA_SASL_AWS_ACCESS_KEY_ID", "AKIA", "WALPOST_KAFKA_SASL_AWS_SECRET_ACCESS_KEY_FILE", secretFile(t, "aws", "s\n"))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.awsEnv {
				t.Setenv("AWS_ACCESS_KEY_ID", "AKIAENV")
				t.Setenv("AWS_SECRET_ACCESS_KEY", "envsecret")
			}
			_, err := load(t, tt.env, "", NeedAll)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want an error naming %v", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestSASLSecretsRedacted: walpost config never prints the OAUTHBEARER
// token or the AWS secret key and session token; values read from a file
// are left empty (the file is read again) and the file names printed.
func TestSASLSecretsRedacted(t *testing.T) {
	for _, tt := range []struct {
		name    string
		env     map[string]string
		secrets []string
		want    []string
	}{
		{"oauth token", with(minimalEnv, "WALPOST_KAFKA_SASL_MECHANISM", "OAUTHBEARER", "WALPOST_KAFKA_SASL_OAUTH_TOKEN", "tok-s3cr3t"),
			[]string{"tok-s3cr3t"}, []string{"oauth_token: " + RedactedValue}},
		{"oauth token file", with(minimalEnv, "WALPOST_KAFKA_SASL_MECHANISM", "OAUTHBEARER", "WALPOST_KAFKA_SASL_OAUTH_TOKEN_FILE", secretFile(t, "t", "tok-fromfile\n")),
			[]string{"tok-fromfile"}, []string{`oauth_token: ""`, "oauth_token_file: /"}},
		{"aws keys", with(minimalEnv, "WALPOST_KAFKA_SASL_MECHANISM", "AWS_MSK_IAM", "WALPOST_KAFKA_TLS_ENABLED", "true",
			"WALPOST_KAFKA_SASL_AWS_ACCESS_KEY_ID", "AKIAPUBLIC", "WALPOST_KAFKA_SASL_AWS_SECRET_ACCESS_KEY", "aws-s3cr3t", "WALPOST_KAFKA_SASL_AWS_SESSION_TOKEN", "sess-s3cr3t"),
			[]string{"aws-s3cr3t", "sess-s3cr3t"}, []string{"aws_access_key_id: AKIAPUBLIC", "aws_secret_access_key: " + RedactedValue, "aws_session_token: " + RedactedValue}},
		{"aws secret file", with(minimalEnv, "WALPOST_KAFKA_SASL_MECHANISM", "AWS_MSK_IAM", "WALPOST_KAFKA_TLS_ENABLED", "true",
			"WALPOST_KAFKA_SASL_AWS_ACCESS_KEY_ID", "AKIAPUBLIC", "WALPOST_KAFKA_SASL_AWS_SECRET_ACCESS_KEY_FILE", secretFile(t, "a", "aws-fromfile\n")),
			[]string{"aws-fromfile"}, []string{`aws_secret_access_key: ""`, "aws_secret_access_key_file: /"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := load(t, tt.env, "", NeedAll)
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			if err := WriteEffective(&out, cfg); err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.secrets {
				if strings.Contains(out.String(), s) {
					t.Errorf("walpost config shows %s:\n%s", s, out.String())
				}
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("walpost config lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}
