package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// clearWalpostEnv unsets every WALPOST_* variable for the test (restored
// afterwards), so a sourced .stack/env does not leak into the unit tests.
func clearWalpostEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "WALPOST_") {
			t.Setenv(k, "") // registers the restore
			os.Unsetenv(k)
		}
	}
}

// writeConfigFile writes a YAML config file and returns its path.
func writeConfigFile(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "walpost.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// testFlags is a flag set with the flags every walpost command has,
// parsed from args.
func testFlags(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse flags %v: %v", args, err)
	}
	return fs
}

// load decodes the configuration from env, an optional YAML file and flags.
func load(t *testing.T, env map[string]string, yaml string, need Needs, flags ...string) (*Config, error) {
	t.Helper()
	clearWalpostEnv(t)
	for k, v := range env {
		t.Setenv(k, v)
	}
	if yaml != "" {
		flags = append(flags, "--config", writeConfigFile(t, yaml))
	}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	AddFlags(fs)
	if err := fs.Parse(flags); err != nil {
		t.Fatal(err)
	}
	return Load(fs, need)
}

var minimalEnv = map[string]string{
	"WALPOST_POSTGRES_URL":  "postgres://walpost:s3cret@127.0.0.1:5432/walpost?sslmode=disable",
	"WALPOST_KAFKA_BROKERS": "127.0.0.1:9092",
}

func with(base map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func TestConfigDefaults(t *testing.T) {
	cfg, err := load(t, minimalEnv, "", NeedAll)
	if err != nil {
		t.Fatalf("minimal config refused: %v", err)
	}
	checks := []struct {
		key  string
		got  any
		want any
	}{
		{"postgres.slot", cfg.Postgres.Slot, "walpost"},
		{"postgres.publication", cfg.Postgres.Publication, "walpost_outbox"},
		{"postgres.table", cfg.Postgres.Table, "outbox"},
		{"postgres.poison_table", cfg.Postgres.PoisonTable, "poison_outbox"},
		{"postgres.status_interval", cfg.Postgres.StatusInterval, 10 * time.Second},
		{"postgres.position_interval", cfg.Postgres.PositionInterval, 200 * time.Millisecond},
		{"kafka.topic", cfg.Kafka.Topic, "outbox"},
		{"kafka.linger", cfg.Kafka.Linger, 5 * time.Millisecond},
		{"kafka.compression", cfg.Kafka.Compression, "snappy"},
		{"kafka.partitioner", cfg.Kafka.Partitioner, PartitionerMurmur2},
		{"kafka.request_timeout", cfg.Kafka.RequestTimeout, 10 * time.Second},
		{"kafka.metadata_max_age", cfg.Kafka.MetadataMaxAge, 5 * time.Minute},
		{"kafka.client_rack", cfg.Kafka.ClientRack, ""},
		{"kafka.flush_timeout", cfg.Kafka.FlushTimeout, 30 * time.Second},
		{"poison.max_attempts", cfg.Poison.MaxAttempts, 5},
		{"poison.backoff", cfg.Poison.Backoff, 200 * time.Millisecond},
		{"delivery.mode", cfg.Delivery.Mode, AtLeastOnce},
		{"delivery.transaction_interval", cfg.Delivery.TransactionInterval, 100 * time.Millisecond},
		{"delivery.transaction_records", cfg.Delivery.TransactionRecords, 5000},
		{"kafka.checkpoint_topic", cfg.Kafka.CheckpointTopic, "walpost_checkpoints"},
		{"recover.margin", cfg.Recover.Margin, 10 * time.Minute},
		{"outbox.retention", cfg.Outbox.Retention, time.Duration(0)},
		{"outbox.prune_interval", cfg.Outbox.PruneInterval, time.Minute},
		{"outbox.prune_batch", cfg.Outbox.PruneBatch, 1000},
		{"http.listen", cfg.HTTP.Listen, ":9187"},
		{"log.level", cfg.Log.Level, "info"},
		{"log.format", cfg.Log.Format, "text"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want default %v", c.key, c.got, c.want)
		}
	}
}

// TestConfigInvalid: every invalid value is refused with an error that
// names the offending key.
func TestConfigInvalid(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		yaml    string
		need    Needs
		wantKey []string // each must appear in the error
	}{
		{name: "postgres.url required", env: with(minimalEnv, "WALPOST_POSTGRES_URL", ""), need: NeedAll,
			wantKey: []string{"postgres.url", "WALPOST_POSTGRES_URL", "required"}},
		{name: "postgres.url required by migrate", env: map[string]string{}, need: NeedPostgres,
			wantKey: []string{"postgres.url"}},
		{name: "kafka.brokers required", env: with(minimalEnv, "WALPOST_KAFKA_BROKERS", ""), need: NeedAll,
			wantKey: []string{"kafka.brokers", "required"}},
		{name: "postgres.url malformed port", env: with(minimalEnv, "WALPOST_POSTGRES_URL", "postgres://u@h:notaport/db"), need: NeedAll,
			wantKey: []string{"postgres.url"}},
		{name: "postgres.url unknown parameter", env: with(minimalEnv, "WALPOST_POSTGRES_URL", "postgres://u@h/db?sslmode=sometimes"), need: NeedAll,
			wantKey: []string{"postgres.url"}},
		{name: "broker without port", env: with(minimalEnv, "WALPOST_KAFKA_BROKERS", "localhost"), need: NeedAll,
			wantKey: []string{"kafka.brokers", `"localhost"`}},
		{name: "broker port out of range", env: with(minimalEnv, "WALPOST_KAFKA_BROKERS", "h:99999"), need: NeedAll,
			wantKey: []string{"kafka.brokers", `"h:99999"`}},
		{name: "broker without host", env: with(minimalEnv, "WALPOST_KAFKA_BROKERS", ":9092"), need: NeedAll,
			wantKey: []string{"kafka.brokers"}},
		{name: "second broker bad", env: with(minimalEnv, "WALPOST_KAFKA_BROKERS", "a:1,b:0"), need: NeedAll,
			wantKey: []string{"kafka.brokers", `"b:0"`}},
		{name: "negative poison.max_attempts", env: with(minimalEnv, "WALPOST_POISON_MAX_ATTEMPTS", "-1"), need: NeedAll,
			wantKey: []string{"poison.max_attempts", "WALPOST_POISON_MAX_ATTEMPTS", `"-1"`}},
		{name: "zero poison.max_attempts in file", env: minimalEnv, yaml: "poison:\n  max_attempts: 0\n", need: NeedAll,
			wantKey: []string{"poison.max_attempts"}},
		{name: "non-numeric poison.max_attempts", env: with(minimalEnv, "WALPOST_POISON_MAX_ATTEMPTS", "many"), need: NeedAll,
			wantKey: []string{"max_attempts"}},
		{name: "unknown top-level key in file", env: minimalEnv, yaml: "kafak:\n  topic: x\n", need: NeedAll,
			wantKey: []string{"kafak", "unknown key"}},
		{name: "unknown nested key in file", env: minimalEnv, yaml: "postgres:\n  slot_name: x\n", need: NeedAll,
			wantKey: []string{"postgres.slot_name", "unknown key"}},
		{name: "unknown keys in two sections", env: minimalEnv, yaml: "postgres:\n  urll: x\nkafak:\n  topic: y\n", need: NeedAll,
			wantKey: []string{"postgres.urll", "kafak"}},
		{name: "bad log.level", env: with(minimalEnv, "WALPOST_LOG_LEVEL", "loud"), need: NeedAll,
			wantKey: []string{"log.level", `"loud"`}},
		{name: "bad log.format", env: with(minimalEnv, "WALPOST_LOG_FORMAT", "xml"), need: NeedAll,
			wantKey: []string{"log.format"}},
		{name: "unparsable duration", env: with(minimalEnv, "WALPOST_KAFKA_LINGER", "banana"), need: NeedAll,
			wantKey: []string{"linger"}},
		{name: "duration without unit in file", env: minimalEnv, yaml: "poison:\n  backoff: 10\n", need: NeedAll,
			wantKey: []string{"backoff"}},
		{name: "negative poison.backoff", env: with(minimalEnv, "WALPOST_POISON_BACKOFF", "-1s"), need: NeedAll,
			wantKey: []string{"poison.backoff"}},
		{name: "unknown delivery.mode", env: with(minimalEnv, "WALPOST_DELIVERY_MODE", "exactly_once"), need: NeedAll,
			wantKey: []string{"delivery.mode"}},
		{name: "transaction_records not below max_inflight_events", env: with(with(minimalEnv, "WALPOST_DELIVERY_MODE", "exactly-once"), "WALPOST_DELIVERY_TRANSACTION_RECORDS", "20000"), need: NeedAll,
			wantKey: []string{"delivery.transaction_records"}},
		{name: "transaction_interval not below transaction_timeout", env: with(with(minimalEnv, "WALPOST_DELIVERY_MODE", "exactly-once"), "WALPOST_DELIVERY_TRANSACTION_INTERVAL", "1m"), need: NeedAll,
			wantKey: []string{"delivery.transaction_interval"}},
		{name: "transaction_timeout above the broker's default maximum", env: with(with(minimalEnv, "WALPOST_DELIVERY_MODE", "exactly-once"), "WALPOST_DELIVERY_TRANSACTION_TIMEOUT", "16m"), need: NeedAll,
			wantKey: []string{"delivery.transaction_timeout"}},
		{name: "checkpoint topic same as kafka.topic", env: with(with(minimalEnv, "WALPOST_DELIVERY_MODE", "exactly-once"), "WALPOST_KAFKA_CHECKPOINT_TOPIC", "outbox"), need: NeedAll,
			wantKey: []string{"kafka.checkpoint_topic"}},
		{name: "zero kafka.flush_timeout", env: with(minimalEnv, "WALPOST_KAFKA_FLUSH_TIMEOUT", "0s"), need: NeedAll,
			wantKey: []string{"kafka.flush_timeout"}},
		{name: "zero poison.rate_window", env: with(minimalEnv, "WALPOST_POISON_RATE_WINDOW", "0s"), need: NeedAll,
			wantKey: []string{"poison.rate_window"}},
		{name: "status_interval above 10s", env: with(minimalEnv, "WALPOST_POSTGRES_STATUS_INTERVAL", "11s"), need: NeedAll,
			wantKey: []string{"postgres.status_interval", "10s"}},
		{name: "position_interval zero", env: with(minimalEnv, "WALPOST_POSTGRES_POSITION_INTERVAL", "0s"), need: NeedAll,
			wantKey: []string{"postgres.position_interval"}},
		{name: "status_interval zero", env: with(minimalEnv, "WALPOST_POSTGRES_STATUS_INTERVAL", "0s"), need: NeedAll,
			wantKey: []string{"postgres.status_interval"}},
		{name: "linger above 1m", env: with(minimalEnv, "WALPOST_KAFKA_LINGER", "2m"), need: NeedAll,
			wantKey: []string{"kafka.linger"}},
		{name: "bad compression", env: with(minimalEnv, "WALPOST_KAFKA_COMPRESSION", "brotli"), need: NeedAll,
			wantKey: []string{"kafka.compression"}},
		{name: "bad partitioner", env: with(minimalEnv, "WALPOST_KAFKA_PARTITIONER", "murmur2_random"), need: NeedAll,
			wantKey: []string{"kafka.partitioner", "WALPOST_KAFKA_PARTITIONER", `"murmur2_random"`, "consistent_random"}},
		{name: "request_timeout below 1s", env: with(minimalEnv, "WALPOST_KAFKA_REQUEST_TIMEOUT", "500ms"), need: NeedAll,
			wantKey: []string{"kafka.request_timeout", "WALPOST_KAFKA_REQUEST_TIMEOUT", "between 1s and 5m"}},
		{name: "zero metadata_max_age", env: with(minimalEnv, "WALPOST_KAFKA_METADATA_MAX_AGE", "0s"), need: NeedAll,
			wantKey: []string{"kafka.metadata_max_age", "WALPOST_KAFKA_METADATA_MAX_AGE", "at least 1s"}},
		{name: "keystore with cert_file", env: with(minimalEnv, "WALPOST_KAFKA_TLS_KEYSTORE_FILE", "c.p12", "WALPOST_KAFKA_TLS_CERT_FILE", "c.pem", "WALPOST_KAFKA_TLS_KEY_FILE", "k.pem"), need: NeedAll,
			wantKey: []string{"kafka.tls.keystore_file", "WALPOST_KAFKA_TLS_KEYSTORE_FILE", "not both"}},
		{name: "key_password without key_file", env: with(minimalEnv, "WALPOST_KAFKA_TLS_KEY_PASSWORD", "hunter2"), need: NeedAll,
			wantKey: []string{"kafka.tls.key_password", "only with kafka.tls.key_file", `"xxxxx"`}},
		{name: "keystore_password without keystore_file", env: with(minimalEnv, "WALPOST_KAFKA_TLS_KEYSTORE_PASSWORD", "hunter2"), need: NeedAll,
			wantKey: []string{"kafka.tls.keystore_password", "only with kafka.tls.keystore_file"}},
		{name: "bad topic", env: with(minimalEnv, "WALPOST_KAFKA_TOPIC", "has space"), need: NeedAll,
			wantKey: []string{"kafka.topic"}},
		{name: "bad slot", env: with(minimalEnv, "WALPOST_POSTGRES_SLOT", "Walpost-1"), need: NeedAll,
			wantKey: []string{"postgres.slot"}},
		{name: "bad http.listen", env: with(minimalEnv, "WALPOST_HTTP_LISTEN", "9187"), need: NeedAll,
			wantKey: []string{"http.listen"}},
		{name: "tiny pipeline.max_inflight_bytes", env: with(minimalEnv, "WALPOST_PIPELINE_MAX_INFLIGHT_BYTES", "10"), need: NeedAll,
			wantKey: []string{"pipeline.max_inflight_bytes"}},
		{name: "negative create_topic_partitions", env: with(minimalEnv, "WALPOST_KAFKA_CREATE_TOPIC_PARTITIONS", "-3"), need: NeedAll,
			wantKey: []string{"kafka.create_topic_partitions"}},
		{name: "negative recover.margin", env: with(minimalEnv, "WALPOST_RECOVER_MARGIN", "-1m"), need: NeedAll,
			wantKey: []string{"recover.margin", "WALPOST_RECOVER_MARGIN", `"-1m0s"`, "longest transaction"}},
		{name: "negative outbox.retention", env: with(minimalEnv, "WALPOST_OUTBOX_RETENTION", "-1h"), need: NeedAll,
			wantKey: []string{"outbox.retention", "WALPOST_OUTBOX_RETENTION", `"-1h0m0s"`, "0 (off) or a positive duration"}},
		{name: "outbox.retention without unit in file", env: minimalEnv, yaml: "outbox:\n  retention: 3600\n", need: NeedAll,
			wantKey: []string{"retention", "unit"}},
		{name: "zero outbox.prune_interval", env: with(minimalEnv, "WALPOST_OUTBOX_PRUNE_INTERVAL", "0s"), need: NeedAll,
			wantKey: []string{"outbox.prune_interval", "WALPOST_OUTBOX_PRUNE_INTERVAL", "positive duration"}},
		{name: "outbox.prune_batch above 100000", env: with(minimalEnv, "WALPOST_OUTBOX_PRUNE_BATCH", "100001"), need: NeedAll,
			wantKey: []string{"outbox.prune_batch", `"100001"`, "1 to 100000"}},
		{name: "zero outbox.prune_batch", env: with(minimalEnv, "WALPOST_OUTBOX_PRUNE_BATCH", "0"), need: NeedAll,
			wantKey: []string{"outbox.prune_batch"}},
		{name: "all problems at once", env: with(minimalEnv, "WALPOST_LOG_LEVEL", "loud", "WALPOST_POISON_MAX_ATTEMPTS", "0", "WALPOST_KAFKA_BROKERS", "localhost"), need: NeedAll,
			wantKey: []string{"log.level", "poison.max_attempts", "kafka.brokers"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := load(t, tt.env, tt.yaml, tt.need)
			if err == nil {
				t.Fatalf("accepted, want an error naming %v; config: %+v", tt.wantKey, cfg)
			}
			for _, k := range tt.wantKey {
				if !strings.Contains(err.Error(), k) {
					t.Errorf("error does not name %q:\n%v", k, err)
				}
			}
		})
	}
}

// TestConfigErrorsRedactPassword: a refused URL never shows its password.
func TestConfigErrorsRedactPassword(t *testing.T) {
	for _, url := range []string{
		"postgres://walpost:hunter2@h:notaport/db",
		"postgres://walpost:hunter2@h/db?sslmode=sometimes",
		"host=h port=notaport user=walpost password=hunter2",
		"postgres://walpost:hunter2@h/db?connect_timeout=soon",
	} {
		t.Run(url, func(t *testing.T) {
			_, err := load(t, with(minimalEnv, "WALPOST_POSTGRES_URL", url), "", NeedAll)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), "postgres.url") {
				t.Errorf("error does not name postgres.url: %v", err)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error shows the password: %v", err)
			}
		})
	}
}

// TestConfigValidAccepted: boundary values that are allowed.
func TestConfigValidAccepted(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"status_interval exactly 10s": with(minimalEnv, "WALPOST_POSTGRES_STATUS_INTERVAL", "10s"),
		"key=value DSN":               with(minimalEnv, "WALPOST_POSTGRES_URL", "host=127.0.0.1 port=5432 user=walpost password=x dbname=walpost"),
		"broker by name and IPv6":     with(minimalEnv, "WALPOST_KAFKA_BROKERS", "kafka:9092,[::1]:9093"),
		"http.listen host:port":       with(minimalEnv, "WALPOST_HTTP_LISTEN", "127.0.0.1:9187"),
		"schema-qualified table":      with(minimalEnv, "WALPOST_POSTGRES_TABLE", "app.outbox"),
		"outbox.retention shorter than recover.margin": with(minimalEnv, "WALPOST_OUTBOX_RETENTION", "1s", "WALPOST_OUTBOX_PRUNE_INTERVAL", "1ms",
			"WALPOST_OUTBOX_PRUNE_BATCH", "100000", "WALPOST_RECOVER_MARGIN", "1h"),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := load(t, env, "", NeedAll); err != nil {
				t.Fatalf("refused: %v", err)
			}
		})
	}
}

// TestConfigOfflineNeedsNothing: commands that work offline accept a
// config without postgres.url or kafka.brokers.
func TestConfigOfflineNeedsNothing(t *testing.T) {
	if _, err := load(t, map[string]string{}, "", NeedNothing); err != nil {
		t.Fatalf("empty config refused for an offline command: %v", err)
	}
	if _, err := load(t, map[string]string{"WALPOST_POSTGRES_URL": minimalEnv["WALPOST_POSTGRES_URL"]}, "", NeedPostgres); err != nil {
		t.Fatalf("config without kafka.brokers refused for a PostgreSQL-only command: %v", err)
	}
}

// TestConfigPrecedence: the environment beats the file, flags beat the
// environment.
func TestConfigPrecedence(t *testing.T) {
	file := `
postgres:
  url: postgres://file@filehost/db
  slot: file_slot
kafka:
  brokers: [file1:9092, file2:9092]
  topic: file-topic
poison:
  max_attempts: 7
log:
  level: warn
`
	tests := []struct {
		name  string
		env   map[string]string
		flags []string
		check func(t *testing.T, c *Config)
	}{
		{name: "file alone", env: map[string]string{}, check: func(t *testing.T, c *Config) {
			eq(t, "postgres.url", c.Postgres.URL, "postgres://file@filehost/db")
			eq(t, "postgres.slot", c.Postgres.Slot, "file_slot")
			eqs(t, "kafka.brokers", c.Kafka.Brokers, []string{"file1:9092", "file2:9092"})
			eq(t, "kafka.topic", c.Kafka.Topic, "file-topic")
			eq(t, "poison.max_attempts", c.Poison.MaxAttempts, 7)
			eq(t, "log.level", c.Log.Level, "warn")
			eq(t, "log.format", c.Log.Format, "text") // default, untouched
		}},
		{name: "environment beats file", env: map[string]string{
			"WALPOST_POSTGRES_URL":        "postgres://env@envhost/db",
			"WALPOST_KAFKA_BROKERS":       "env1:9092",
			"WALPOST_KAFKA_TOPIC":         "env-topic",
			"WALPOST_POISON_MAX_ATTEMPTS": "9",
			"WALPOST_LOG_LEVEL":           "error",
		}, check: func(t *testing.T, c *Config) {
			eq(t, "postgres.url", c.Postgres.URL, "postgres://env@envhost/db")
			eq(t, "postgres.slot", c.Postgres.Slot, "file_slot") // not in env: file stays
			eqs(t, "kafka.brokers", c.Kafka.Brokers, []string{"env1:9092"})
			eq(t, "kafka.topic", c.Kafka.Topic, "env-topic")
			eq(t, "poison.max_attempts", c.Poison.MaxAttempts, 9)
			eq(t, "log.level", c.Log.Level, "error")
		}},
		{name: "flags beat environment", env: map[string]string{
			"WALPOST_POSTGRES_URL":        "postgres://env@envhost/db",
			"WALPOST_KAFKA_BROKERS":       "env1:9092",
			"WALPOST_KAFKA_TOPIC":         "env-topic",
			"WALPOST_POSTGRES_SLOT":       "env_slot",
			"WALPOST_POISON_MAX_ATTEMPTS": "9",
			"WALPOST_LOG_LEVEL":           "error",
		}, flags: []string{
			"--postgres-url", "postgres://flag@flaghost/db",
			"--kafka-brokers", "flag1:9092,flag2:9092",
			"--kafka-topic", "flag-topic",
			"--slot", "flag_slot",
			"--log-level", "debug",
		}, check: func(t *testing.T, c *Config) {
			eq(t, "postgres.url", c.Postgres.URL, "postgres://flag@flaghost/db")
			eqs(t, "kafka.brokers", c.Kafka.Brokers, []string{"flag1:9092", "flag2:9092"})
			eq(t, "kafka.topic", c.Kafka.Topic, "flag-topic")
			eq(t, "postgres.slot", c.Postgres.Slot, "flag_slot")
			eq(t, "log.level", c.Log.Level, "debug")
			eq(t, "poison.max_attempts", c.Poison.MaxAttempts, 9) // no flag: env stays
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearWalpostEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			args := append([]string{"--config", writeConfigFile(t, file)}, tt.flags...)
			cfg, err := Load(testFlags(t, args...), NeedAll)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, cfg)
		})
	}
}

// TestConfigUnsetFlagDoesNotHideEnv: a flag the user did not pass leaves the
// environment in charge (its empty default must not win).
func TestConfigUnsetFlagDoesNotHideEnv(t *testing.T) {
	clearWalpostEnv(t)
	t.Setenv("WALPOST_KAFKA_TOPIC", "env-topic")
	cfg, err := Load(testFlags(t), NeedNothing)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "kafka.topic", cfg.Kafka.Topic, "env-topic")
}

func TestConfigBrokersFromEnvironment(t *testing.T) {
	for _, tt := range []struct {
		env  string
		want []string
	}{
		{"a:1,b:2", []string{"a:1", "b:2"}},
		{" a:1 , b:2 ,", []string{"a:1", "b:2"}},
		{"a:1", []string{"a:1"}},
	} {
		t.Run(tt.env, func(t *testing.T) {
			cfg, err := load(t, with(minimalEnv, "WALPOST_KAFKA_BROKERS", tt.env), "", NeedAll)
			if err != nil {
				t.Fatal(err)
			}
			eqs(t, "kafka.brokers", cfg.Kafka.Brokers, tt.want)
		})
	}
}

// TestConfigEmptyEnvDisablesHTTP: http.listen documents "empty disables",
// and the integration harness sets WALPOST_HTTP_LISTEN= to turn the server
// off; an empty variable must therefore count as set.
func TestConfigEmptyEnvDisablesHTTP(t *testing.T) {
	cfg, err := load(t, with(minimalEnv, "WALPOST_HTTP_LISTEN", ""), "", NeedAll)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "http.listen", cfg.HTTP.Listen, "")
}

// TestConfigKeysAreUnique: every key and variable appears once and follows
// the WALPOST_ + upper-cased key rule of DESIGN.md, Contracts.
func TestConfigKeysAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Keys() {
		if seen[k.Env] {
			t.Errorf("variable %s appears twice", k.Env)
		}
		seen[k.Env] = true
		if want := "WALPOST_" + strings.ToUpper(strings.ReplaceAll(k.Key, ".", "_")); k.Env != want {
			t.Errorf("%s: variable %s, want %s", k.Key, k.Env, want)
		}
		if k.Doc == "" {
			t.Errorf("%s lacks a doc tag", k.Key)
		}
	}
	for _, k := range []string{"WALPOST_POSTGRES_URL", "WALPOST_KAFKA_BROKERS", "WALPOST_KAFKA_TOPIC", "WALPOST_POISON_MAX_ATTEMPTS", "WALPOST_HTTP_LISTEN"} {
		if !seen[k] {
			t.Errorf("variable %s (DESIGN.md, Contracts) is not a config key", k)
		}
	}
	for flag, key := range flagKeys {
		found := false
		for _, k := range Keys() {
			found = found || k.Key == key
		}
		if !found {
			t.Errorf("flag --%s is bound to unknown key %s", flag, key)
		}
	}
}

func TestConfigErrorIsTyped(t *testing.T) {
	_, err := load(t, with(minimalEnv, "WALPOST_LOG_LEVEL", "loud"), "", NeedAll)
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v is not a *Error", err)
	}
	eq(t, "Error.Key", ce.Key, "log.level")
	eq(t, "Error.Value", ce.Value, "loud")
}

func eq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func eqs(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s = %q, want %q", what, got, want)
	}
}
