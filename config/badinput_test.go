package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// badInput is one bad configuration: variables, a config file (name and
// content; none when name is empty) and flags, and the exact message
// Load returns (the file's directory removed).
type badInput struct {
	name  string
	env   []string
	file  string // file name, e.g. walpost.yaml
	body  string // its content
	flags []string
	want  string
}

// loadBad loads tt's configuration and returns Load's message with the
// temporary directory removed.
func loadBad(t *testing.T, tt badInput) string {
	t.Helper()
	clearWalpostEnv(t)
	t.Setenv("WALPOST_POSTGRES_URL", "postgres://walpost:s3cret@127.0.0.1:5432/walpost")
	t.Setenv("WALPOST_KAFKA_BROKERS", "127.0.0.1:9092")
	for i := 0; i+1 < len(tt.env); i += 2 {
		t.Setenv(tt.env[i], tt.env[i+1])
	}
	dir := t.TempDir()
	flags := tt.flags
	if tt.file != "" {
		path := filepath.Join(dir, tt.file)
		if tt.body != "-" {
			if err := os.WriteFile(path, []byte(tt.body), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		flags = append(flags, "--config", path)
	}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	AddFlags(fs)
	if err := fs.Parse(flags); err != nil {
		t.Fatal(err)
	}
	_, err := Load(fs, NeedAll)
	if err == nil {
		return ""
	}
	return strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), "")
}

// TestBadInputMessages: each bad input of the environment, the config file
// and the flags is refused with this exact message (README, Bad-input
// catalogue). Mutations tried: dropping the distance cut-off of
// closestKey (WALPOST_CONFIG then suggests a key), and returning the first
// error of Load instead of all (the "reported together" cases fail).
func TestBadInputMessages(t *testing.T) {
	for _, tt := range badInputs {
		t.Run(tt.name, func(t *testing.T) {
			if got := loadBad(t, tt); got != tt.want {
				t.Errorf("message\n got: %s\nwant: %s", got, tt.want)
			}
		})
	}
	if len(badInputs) < 25 {
		t.Errorf("%d bad inputs, want at least 25", len(badInputs))
	}
}

var badInputs = []badInput{
	// The environment.
	{name: "env misspelled variable", env: []string{"WALPOST_KAFKA_BROKER", "k:9092"},
		want: `invalid config: unknown environment variable WALPOST_KAFKA_BROKER="k:9092": did you mean WALPOST_KAFKA_BROKERS (kafka.brokers)? A key's variable is WALPOST_ and the upper-cased key with _ for . (walpost config --reference lists them); rename or unset WALPOST_KAFKA_BROKER`},
	{name: "env far from every key", env: []string{"WALPOST_CONFIG", "walpost.yaml"},
		want: `invalid config: unknown environment variable WALPOST_CONFIG="walpost.yaml": there is no variable for the config file: pass --config FILE; unset WALPOST_CONFIG`},
	{name: "env acks", env: []string{"WALPOST_KAFKA_ACKS", "1"},
		want: `invalid config: unknown environment variable WALPOST_KAFKA_ACKS="1": acks are fixed at all (-1): walpost's delivery guarantee needs every in-sync replica's ack, so the producer always asks for it (with idempotence); there is no setting; unset WALPOST_KAFKA_ACKS`},
	{name: "env unrelated variable", env: []string{"WALPOST_FOO", "bar"},
		want: `invalid config: unknown environment variable WALPOST_FOO="bar": no key's variable is close to it. A key's variable is WALPOST_ and the upper-cased key with _ for . (walpost config --reference lists them); unset WALPOST_FOO`},
	{name: "env integer", env: []string{"WALPOST_POISON_MAX_ATTEMPTS", "many"},
		want: `invalid config: poison.max_attempts (WALPOST_POISON_MAX_ATTEMPTS) = "many" from the environment: an integer, e.g. 5`},
	{name: "env duration without unit", env: []string{"WALPOST_KAFKA_LINGER", "10"},
		want: `invalid config: kafka.linger (WALPOST_KAFKA_LINGER) = "10" from the environment: a duration with a unit, e.g. "200ms", "10s" or "1m"`},
	{name: "env bool", env: []string{"WALPOST_KAFKA_TLS_ENABLED", "yes please"},
		want: `invalid config: kafka.tls.enabled (WALPOST_KAFKA_TLS_ENABLED) = "yes please" from the environment: true or false`},
	{name: "env value out of range", env: []string{"WALPOST_POISON_MAX_ATTEMPTS", "-1"},
		want: `invalid config: poison.max_attempts (WALPOST_POISON_MAX_ATTEMPTS) = "-1" from the environment: at least 1`},
	{name: "env enumeration", env: []string{"WALPOST_KAFKA_COMPRESSION", "brotli"},
		want: `invalid config: kafka.compression (WALPOST_KAFKA_COMPRESSION) = "brotli" from the environment: one of none, gzip, snappy, lz4, zstd`},
	{name: "env broker with scheme", env: []string{"WALPOST_KAFKA_BROKERS", "PLAINTEXT://kafka:9092"},
		want: `invalid config: kafka.brokers (WALPOST_KAFKA_BROKERS) = "PLAINTEXT://kafka:9092" from the environment: host:port without a scheme: drop the scheme "PLAINTEXT://" (a listener name is the broker's setting, not the client's), e.g. kafka:9092`},
	{name: "env broker without port", env: []string{"WALPOST_KAFKA_BROKERS", "kafka"},
		want: `invalid config: kafka.brokers (WALPOST_KAFKA_BROKERS) = "kafka" from the environment: host:port with the port: walpost does not assume 9092, write kafka:9092`},
	{name: "env broker port out of range", env: []string{"WALPOST_KAFKA_BROKERS", "kafka:99999"},
		want: `invalid config: kafka.brokers (WALPOST_KAFKA_BROKERS) = "kafka:99999" from the environment: a port between 1 and 65535`},
	{name: "env secret and its file both set", env: []string{"WALPOST_POSTGRES_URL_FILE", "/nonexistent/url"},
		want: "invalid config: postgres.url (WALPOST_POSTGRES_URL) and postgres.url_file (WALPOST_POSTGRES_URL_FILE) are both set: set one of them"},
	// The file.
	{name: "file unknown key", file: "walpost.yaml", body: "kafka:\n  broker: [k:9092]\n",
		want: "invalid config: unknown key kafka.broker in the config file walpost.yaml: did you mean kafka.brokers (WALPOST_KAFKA_BROKERS)? walpost config --reference lists the keys"},
	{name: "file unknown key far from every key", file: "walpost.yaml", body: "color: blue\n",
		want: "invalid config: unknown key color in the config file walpost.yaml: no key is close to it; walpost config --reference lists the keys"},
	{name: "file acks", file: "walpost.yaml", body: "kafka:\n  acks: 1\n",
		want: "invalid config: unknown key kafka.acks in the config file walpost.yaml: acks are fixed at all (-1): walpost's delivery guarantee needs every in-sync replica's ack, so the producer always asks for it (with idempotence); there is no setting; remove it"},
	{name: "file integer", file: "walpost.yaml", body: "poison:\n  max_attempts: [1, 2]\n",
		want: `invalid config: poison.max_attempts (WALPOST_POISON_MAX_ATTEMPTS) = "[1,2]" from the config file walpost.yaml: an integer, e.g. 5`},
	{name: "file bool", file: "walpost.yaml", body: "kafka:\n  tls:\n    enabled: maybe\n",
		want: `invalid config: kafka.tls.enabled (WALPOST_KAFKA_TLS_ENABLED) = "maybe" from the config file walpost.yaml: true or false`},
	{name: "file duration without unit", file: "walpost.yaml", body: "postgres:\n  status_interval: 5\n",
		want: `invalid config: postgres.status_interval (WALPOST_POSTGRES_STATUS_INTERVAL) = "5" from the config file walpost.yaml: a duration with a unit, e.g. "200ms", "10s" or "1m" (a bare number has no unit; quote it with one, e.g. "10s")`},
	{name: "file string given a table", file: "walpost.toml", body: "[kafka]\ntopic = { name = \"x\" }\n",
		want: `invalid config: kafka.topic (WALPOST_KAFKA_TOPIC) = "{\"name\":\"x\"}" from the config file walpost.toml: a string, not a list or a table`},
	{name: "file invalid value", file: "walpost.json", body: `{"log": {"level": "verbose"}}`,
		want: `invalid config: log.level (WALPOST_LOG_LEVEL) = "verbose" from the config file walpost.json: one of debug, info, warn, error`},
	{name: "file no extension", file: "walpost", body: "log:\n  level: info\n",
		want: "invalid config: --config walpost: the file has no extension: name the file *.yaml, *.yml, *.toml or *.json after its format"},
	{name: "file unknown extension", file: "walpost.conf", body: "log:\n  level: info\n",
		want: `invalid config: --config walpost.conf: the extension ".conf" is not one walpost reads: name the file *.yaml, *.yml, *.toml or *.json after its format`},
	{name: "file missing", file: "missing.yaml", body: "-",
		want: "invalid config: --config missing.yaml: cannot read the file: no such file or directory"},
	{name: "file not YAML", file: "walpost.yaml", body: "log: [\n",
		want: "invalid config: --config walpost.yaml: not valid YAML: yaml: line 1: did not find expected node content"},
	// Flags.
	{name: "flag invalid slot", flags: []string{"--slot", "Bad-Slot"},
		want: `invalid config: postgres.slot (WALPOST_POSTGRES_SLOT) = "Bad-Slot" from the flag --slot: a slot name: lower-case letters, digits and _ (at most 63)`},
	{name: "flag invalid log level", flags: []string{"--log-level", "loud"},
		want: `invalid config: log.level (WALPOST_LOG_LEVEL) = "loud" from the flag --log-level: one of debug, info, warn, error`},
	{name: "flag broker with scheme", flags: []string{"--kafka-brokers", "SASL_SSL://b-1.example:9096"},
		want: `invalid config: kafka.brokers (WALPOST_KAFKA_BROKERS) = "SASL_SSL://b-1.example:9096" from the flag --kafka-brokers: host:port without a scheme: drop the scheme "SASL_SSL://" (a listener name is the broker's setting, not the client's), e.g. b-1.example:9096`},
	{name: "flag --set unknown key", flags: []string{"--set", "kafka.compresion=zstd"},
		want: "invalid config: --set kafka.compresion=zstd: unknown key kafka.compresion: did you mean kafka.compression (WALPOST_KAFKA_COMPRESSION)? walpost config --reference lists the keys"},
	{name: "flag --set without a value", flags: []string{"--set", "kafka.compression"},
		want: `invalid config: --set "kafka.compression": want KEY=VALUE, e.g. --set kafka.compression=zstd`},
	{name: "flag --set invalid value", env: []string{"WALPOST_KAFKA_COMPRESSION", "zstd"}, flags: []string{"--set", "kafka.compression=brotli"},
		want: `invalid config: kafka.compression (WALPOST_KAFKA_COMPRESSION) = "brotli" from the flag --set: one of none, gzip, snappy, lz4, zstd`},
	{name: "flag --set acks", flags: []string{"--set", "kafka.acks=1"},
		want: "invalid config: --set kafka.acks=1: unknown key kafka.acks: acks are fixed at all (-1): walpost's delivery guarantee needs every in-sync replica's ack, so the producer always asks for it (with idempotence); there is no setting; remove it"},
	// Case, sources and all at once.
	{name: "case of enumerations is not significant", env: []string{"WALPOST_LOG_LEVEL", "INFO", "WALPOST_KAFKA_SASL_MECHANISM", "scram-sha-512", "WALPOST_KAFKA_SASL_USERNAME", "u", "WALPOST_LOG_FORMAT", "JSON"},
		want: ""},
	{name: "all errors of one load together", env: []string{"WALPOST_KAFKA_BROKER", "k:9092", "WALPOST_POISON_MAX_ATTEMPTS", "0"},
		file: "walpost.yaml", body: "log:\n  levle: debug\nkafka:\n  linger: 5\n", flags: []string{"--log-format", "xml"},
		want: "invalid config: unknown environment variable WALPOST_KAFKA_BROKER=\"k:9092\": did you mean WALPOST_KAFKA_BROKERS (kafka.brokers)? A key's variable is WALPOST_ and the upper-cased key with _ for . (walpost config --reference lists them); rename or unset WALPOST_KAFKA_BROKER\ninvalid config: unknown key log.levle in the config file walpost.yaml: did you mean log.level (WALPOST_LOG_LEVEL)? walpost config --reference lists the keys\ninvalid config: kafka.linger (WALPOST_KAFKA_LINGER) = \"5\" from the config file walpost.yaml: a duration with a unit, e.g. \"200ms\", \"10s\" or \"1m\" (a bare number has no unit; quote it with one, e.g. \"10s\")\ninvalid config: poison.max_attempts (WALPOST_POISON_MAX_ATTEMPTS) = \"0\" from the environment: at least 1\ninvalid config: log.format (WALPOST_LOG_FORMAT) = \"xml\" from the flag --log-format: text or json"},
}

// TestEnumerationCase: one case rule for every enumeration: the case is
// not significant and the value is read in its canonical case.
func TestEnumerationCase(t *testing.T) {
	cfg, err := load(t, with(minimalEnv, "WALPOST_LOG_LEVEL", "INFO", "WALPOST_KAFKA_SASL_MECHANISM", "scram-sha-512",
		"WALPOST_KAFKA_SASL_USERNAME", "u", "WALPOST_KAFKA_COMPRESSION", "ZSTD", "WALPOST_DELIVERY_MODE", "At-Least-Once"), "", NeedAll)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range [][2]string{{cfg.Log.Level, "info"}, {cfg.Kafka.SASL.Mechanism, "SCRAM-SHA-512"}, {cfg.Kafka.Compression, "zstd"}, {cfg.Delivery.Mode, "at-least-once"}} {
		if c[0] != c[1] {
			t.Errorf("read %q, want %q", c[0], c[1])
		}
	}
}

// TestSetFlag: --set KEY=VALUE sets any key, over the file, the
// environment and the shortcut flags; a list key takes commas.
func TestSetFlag(t *testing.T) {
	cfg, err := load(t, with(minimalEnv, "WALPOST_KAFKA_COMPRESSION", "gzip"), "log:\n  format: json\n", NeedAll,
		"--set", "kafka.compression=zstd", "--log-level", "warn", "--set", "log.level=debug",
		"--set", "kafka.brokers=a:1,b:2", "--set", "Delivery.Mode=exactly-once")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Kafka.Compression != "zstd" || cfg.Log.Level != "debug" || cfg.Log.Format != "json" ||
		strings.Join(cfg.Kafka.Brokers, " ") != "a:1 b:2" || cfg.Delivery.Mode != "exactly-once" {
		t.Errorf("compression %q, log %q/%q, brokers %v, mode %q", cfg.Kafka.Compression, cfg.Log.Level, cfg.Log.Format, cfg.Kafka.Brokers, cfg.Delivery.Mode)
	}
}

// TestSchemaRegistryInput: the schema_registry keys are checked only when
// a registry format is chosen, and each problem names its key and the fix.
func TestSchemaRegistryInput(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(secret, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		env  []string
		want []string // substrings of the message; none: Load succeeds
	}{
		{"off by default", []string{"WALPOST_SCHEMA_REGISTRY_URL", "::"}, nil},
		{"unknown format", []string{"WALPOST_SCHEMA_REGISTRY_VALUE_FORMAT", "thrift"},
			[]string{"schema_registry.value_format", "none, avro, json_schema or protobuf"}},
		{"url required", []string{"WALPOST_SCHEMA_REGISTRY_VALUE_FORMAT", "avro"},
			[]string{"schema_registry.url", "required with schema_registry.value_format = avro"}},
		{"url scheme", []string{"WALPOST_SCHEMA_REGISTRY_VALUE_FORMAT", "avro", "WALPOST_SCHEMA_REGISTRY_URL", "registry:8081"},
			[]string{"schema_registry.url", "an http:// or https:// URL"}},
		{"strategy", []string{"WALPOST_SCHEMA_REGISTRY_VALUE_FORMAT", "protobuf", "WALPOST_SCHEMA_REGISTRY_URL", "http://r:8081", "WALPOST_SCHEMA_REGISTRY_SUBJECT_STRATEGY", "topic"},
			[]string{"schema_registry.subject_strategy", "topic_name, record_name or topic_record_name"}},
		{"converter format", []string{"WALPOST_SCHEMA_REGISTRY_VALUE_FORMAT", "json_schema", "WALPOST_SCHEMA_REGISTRY_URL", "http://r:8081",
			"WALPOST_MAPPING_PROFILE", "debezium", "WALPOST_MAPPING_VALUE_FORMAT", "json"},
			[]string{"mapping.value_format", "string with schema_registry.value_format = json_schema"}},
		{"password and its file", []string{"WALPOST_SCHEMA_REGISTRY_VALUE_FORMAT", "avro", "WALPOST_SCHEMA_REGISTRY_URL", "https://r",
			"WALPOST_SCHEMA_REGISTRY_USERNAME", "u", "WALPOST_SCHEMA_REGISTRY_PASSWORD", "p", "WALPOST_SCHEMA_REGISTRY_PASSWORD_FILE", secret},
			[]string{"schema_registry.password (WALPOST_SCHEMA_REGISTRY_PASSWORD) and schema_registry.password_file", "set one of them"}},
		{"password file", []string{"WALPOST_SCHEMA_REGISTRY_VALUE_FORMAT", "avro", "WALPOST_SCHEMA_REGISTRY_URL", "https://r",
			"WALPOST_SCHEMA_REGISTRY_USERNAME", "u", "WALPOST_SCHEMA_REGISTRY_PASSWORD_FILE", secret}, nil},
		{"key format", []string{"WALPOST_SCHEMA_REGISTRY_KEY_FORMAT", "protobuf"},
			[]string{"schema_registry.key_format", "none, avro or json_schema"}},
		{"key format needs the url", []string{"WALPOST_SCHEMA_REGISTRY_KEY_FORMAT", "avro"},
			[]string{"schema_registry.url", "required with schema_registry.key_format = avro"}},
		{"key converter format", []string{"WALPOST_SCHEMA_REGISTRY_KEY_FORMAT", "avro", "WALPOST_SCHEMA_REGISTRY_URL", "http://r:8081",
			"WALPOST_MAPPING_PROFILE", "debezium", "WALPOST_MAPPING_KEY_FORMAT", "json"},
			[]string{"mapping.key_format", "string with schema_registry.key_format = avro"}},
		{"cert without key", []string{"WALPOST_SCHEMA_REGISTRY_VALUE_FORMAT", "avro", "WALPOST_SCHEMA_REGISTRY_URL", "https://r",
			"WALPOST_SCHEMA_REGISTRY_TLS_CERT_FILE", "c.pem"},
			[]string{"schema_registry.tls_cert_file", "go together"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := loadBad(t, badInput{env: tt.env})
			if tt.want == nil {
				if got != "" {
					t.Fatalf("Load: %s, want no error", got)
				}
				return
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("Load: %s\nwant it to contain %q", got, w)
				}
			}
		})
	}
	// The password comes from its file.
	clearWalpostEnv(t)
	t.Setenv("WALPOST_POSTGRES_URL", "postgres://walpost@127.0.0.1:5432/walpost")
	t.Setenv("WALPOST_KAFKA_BROKERS", "127.0.0.1:9092")
	t.Setenv("WALPOST_SCHEMA_REGISTRY_VALUE_FORMAT", "avro")
	t.Setenv("WALPOST_SCHEMA_REGISTRY_URL", "https://r")
	t.Setenv("WALPOST_SCHEMA_REGISTRY_USERNAME", "u")
	t.Setenv("WALPOST_SCHEMA_REGISTRY_PASSWORD_FILE", secret)
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	AddFlags(fs)
	c, err := Load(fs, NeedAll)
	if err != nil {
		t.Fatal(err)
	}
	if c.Schema.Password != "s3cret" {
		t.Errorf("schema_registry.password = %q, want the file's s3cret", c.Schema.Password)
	}
}
