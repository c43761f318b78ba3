package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func secretFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSecretFiles: WALPOST_POSTGRES_URL_FILE and
// WALPOST_KAFKA_SASL_PASSWORD_FILE (and their keys in a config file) set
// the secret from the file, one trailing newline trimmed.
func TestSecretFiles(t *testing.T) {
	url := secretFile(t, "pg-url", "postgres://walpost:fromfile-pg@db:5432/walpost?sslmode=require\n")
	pw := secretFile(t, "sasl", "fromfile-sasl\r\n")
	env := map[string]string{
		"WALPOST_POSTGRES_URL_FILE":        url,
		"WALPOST_KAFKA_BROKERS":            "127.0.0.1:9092",
		"WALPOST_KAFKA_SASL_MECHANISM":     "SCRAM-SHA-512",
		"WALPOST_KAFKA_SASL_USERNAME":      "walpost",
		"WALPOST_KAFKA_SASL_PASSWORD_FILE": pw,
	}
	cfg, err := load(t, env, "", NeedAll)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "postgres.url", cfg.Postgres.URL, "postgres://walpost:fromfile-pg@db:5432/walpost?sslmode=require")
	eq(t, "kafka.sasl.password", cfg.Kafka.SASL.Password, "fromfile-sasl")

	yaml := "postgres:\n  url_file: " + url + "\nkafka:\n  brokers: [\"127.0.0.1:9092\"]\n  sasl:\n    mechanism: PLAIN\n    username: u\n    password_file: " + pw + "\n"
	cfg, err = load(t, map[string]string{}, yaml, NeedAll)
	if err != nil {
		t.Fatalf("config file keys: %v", err)
	}
	eq(t, "postgres.url from the file's url_file", cfg.Postgres.URL, "postgres://walpost:fromfile-pg@db:5432/walpost?sslmode=require")
	eq(t, "kafka.sasl.password from the file's password_file", cfg.Kafka.SASL.Password, "fromfile-sasl")

	// Only one trailing newline goes: a password may end in spaces.
	cfg, err = load(t, with(minimalEnv, "WALPOST_KAFKA_SASL_PASSWORD_FILE", secretFile(t, "p2", "pw  \n\n")), "", NeedAll)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "password with trailing blanks", cfg.Kafka.SASL.Password, "pw  \n")
}

// TestSecretFileErrors: a value and its file both set is an error naming
// both; a file that cannot be read names the key, its variable and the
// path; an empty file is refused. No error shows the secret.
func TestSecretFileErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-secret")
	for _, tt := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"url and url_file", with(minimalEnv, "WALPOST_POSTGRES_URL_FILE", secretFile(t, "u", "postgres://a:b@h/d")),
			[]string{"postgres.url (WALPOST_POSTGRES_URL)", "postgres.url_file (WALPOST_POSTGRES_URL_FILE)", "both set"}},
		{"password and password_file", with(minimalEnv, "WALPOST_KAFKA_SASL_PASSWORD", "hunter2", "WALPOST_KAFKA_SASL_PASSWORD_FILE", secretFile(t, "p", "x")),
			[]string{"kafka.sasl.password (WALPOST_KAFKA_SASL_PASSWORD)", "kafka.sasl.password_file (WALPOST_KAFKA_SASL_PASSWORD_FILE)", "both set"}},
		{"unreadable url_file", map[string]string{"WALPOST_POSTGRES_URL_FILE": missing, "WALPOST_KAFKA_BROKERS": "127.0.0.1:9092"},
			[]string{"postgres.url_file (WALPOST_POSTGRES_URL_FILE)", missing, "no such file"}},
		{"unreadable password_file", with(minimalEnv, "WALPOST_KAFKA_SASL_PASSWORD_FILE", missing),
			[]string{"kafka.sasl.password_file (WALPOST_KAFKA_SASL_PASSWORD_FILE)", missing}},
		{"empty password_file", with(minimalEnv, "WALPOST_KAFKA_SASL_PASSWORD_FILE", secretFile(t, "e", "\n")),
			[]string{"kafka.sasl.password_file", "empty"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, tt.env, "", NeedAll)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
			for _, secret := range []string{"hunter2", "s3cret", "a:b@"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error shows a secret (%s): %v", secret, err)
				}
			}
		})
	}
}

// TestSecretFilesEffective: `walpost config` prints the file names, never
// the secrets read from them, and its output loads back to the same
// configuration (the files are read again).
func TestSecretFilesEffective(t *testing.T) {
	url := secretFile(t, "pg-url", "postgres://walpost:fromfile-pg@db:5432/walpost\n")
	pw := secretFile(t, "sasl", "fromfile-sasl\n")
	env := map[string]string{
		"WALPOST_POSTGRES_URL_FILE":        url,
		"WALPOST_KAFKA_BROKERS":            "127.0.0.1:9092",
		"WALPOST_KAFKA_SASL_MECHANISM":     "PLAIN",
		"WALPOST_KAFKA_SASL_USERNAME":      "u",
		"WALPOST_KAFKA_SASL_PASSWORD_FILE": pw,
	}
	cfg, err := load(t, env, "", NeedAll)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := WriteEffective(&out, cfg); err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"fromfile-pg", "fromfile-sasl"} {
		if strings.Contains(out.String(), secret) {
			t.Fatalf("walpost config shows %s:\n%s", secret, out.String())
		}
	}
	for _, want := range []string{"url_file: " + url, "password_file: " + pw} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("walpost config lacks %q:\n%s", want, out.String())
		}
	}
	back, err := load(t, map[string]string{}, out.String(), NeedAll)
	if err != nil {
		t.Fatalf("output does not load back: %v\n%s", err, out.String())
	}
	if !reflect.DeepEqual(back, cfg) {
		t.Errorf("loaded back\n%+v\nwant\n%+v", *back, *cfg)
	}
}
