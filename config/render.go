package config

import (
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/walpost/walpost/internal/redact"
)

// WriteReference prints the configuration table the README carries.
func WriteReference(w io.Writer) {
	fmt.Fprintln(w, "| key | environment variable | default | meaning |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, k := range Keys() {
		fmt.Fprintf(w, "| `%s` | `%s` | `%s` | %s |\n", k.Key, k.Env, k.Default, k.Doc)
	}
}

// RedactedValue replaces secrets in the output of WriteEffective.
const RedactedValue = "xxxxx"

// WriteEffective prints cfg as YAML that `walpost --config FILE` reads
// back, keys in declaration order, durations with their unit. Secrets are
// redacted (postgres.url's password and kafka.sasl.password become
// xxxxx), and the header says so: set them again before using the file.
func WriteEffective(w io.Writer, cfg *Config) error {
	var walk func(v reflect.Value, prefix string) *yaml.Node
	walk = func(v reflect.Value, prefix string) *yaml.Node {
		m := &yaml.Node{Kind: yaml.MappingNode}
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			name := t.Field(i).Tag.Get("mapstructure")
			key := name
			if prefix != "" {
				key = prefix + "." + name
			}
			fv := v.Field(i)
			var val *yaml.Node
			switch {
			case fv.Kind() == reflect.Struct:
				val = walk(fv, key)
			case fv.Kind() == reflect.Slice:
				val = &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
				for j := 0; j < fv.Len(); j++ {
					val.Content = append(val.Content, scalar(fmt.Sprint(fv.Index(j).Interface()), "!!str"))
				}
			case fv.Type() == reflect.TypeOf(time.Duration(0)):
				val = scalar(time.Duration(fv.Int()).String(), "!!str")
			case fv.Kind() == reflect.String:
				s := redact.String(fv.String())
				switch {
				case fromFile(cfg, key):
					// Read from its *_file key, which is printed: the
					// file is read again when this output is loaded.
					s = ""
				case isSecret(key) && s != "":
					s = RedactedValue
				}
				val = scalar(s, "!!str")
			case fv.Kind() == reflect.Bool:
				val = scalar(fmt.Sprint(fv.Bool()), "!!bool")
			default:
				val = scalar(fmt.Sprint(fv.Interface()), "!!int")
			}
			m.Content = append(m.Content, scalar(name, "!!str"), val)
		}
		return m
	}
	doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{walk(reflect.ValueOf(*cfg), "")}}
	doc.HeadComment = "walpost effective configuration; walpost --config FILE reads it back.\n" +
		"Secrets are redacted: the password in postgres.url, kafka.sasl.password, oauth_token, the AWS secrets and the TLS key passwords read " + RedactedValue + ";\n" +
		"set them again (e.g. WALPOST_POSTGRES_URL, WALPOST_KAFKA_SASL_PASSWORD) before using this file.\n" +
		"Values read from a *_file key are left empty: the file is read again."
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return err
	}
	return enc.Close()
}

// fromFile says whether the value of key came from its *_file key.
func fromFile(cfg *Config, key string) bool {
	switch key {
	case "postgres.url":
		return cfg.Postgres.URLFile != ""
	case "kafka.sasl.password":
		return cfg.Kafka.SASL.PasswordFile != ""
	case "kafka.sasl.oauth_token":
		return cfg.Kafka.SASL.OAuthTokenFile != ""
	case "kafka.sasl.aws_secret_access_key":
		return cfg.Kafka.SASL.AWSSecretAccessKeyFile != ""
	case "kafka.tls.key_password":
		return cfg.Kafka.TLS.KeyPasswordFile != ""
	case "kafka.tls.keystore_password":
		return cfg.Kafka.TLS.KeystorePasswordFile != ""
	case "schema_registry.password":
		return cfg.Schema.PasswordFile != ""
	}
	return false
}

// isSecret says whether key holds a secret WriteEffective redacts.
func isSecret(key string) bool {
	switch key {
	case "kafka.sasl.oauth_token", "kafka.sasl.aws_secret_access_key", "kafka.sasl.aws_session_token":
		return true
	}
	return strings.HasSuffix(key, "password")
}

func scalar(value, tag string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
}
