package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestConfigUnknownVariable: a misspelled WALPOST_* variable stops Load
// with an error naming it and the closest key; the stack's and the tests'
// own variables stay allowed.
func TestConfigUnknownVariable(t *testing.T) {
	for _, tt := range []struct {
		name, variable, value string
		want                  []string
	}{
		{"singular brokers", "WALPOST_KAFKA_BROKER", "127.0.0.1:9092",
			[]string{"WALPOST_KAFKA_BROKER", "WALPOST_KAFKA_BROKERS", "kafka.brokers", `"127.0.0.1:9092"`}},
		{"swapped letters", "WALPOST_POISON_MAX_ATTEMTPS", "3",
			[]string{"WALPOST_POISON_MAX_ATTEMTPS", "WALPOST_POISON_MAX_ATTEMPTS"}},
		{"password redacted", "WALPOST_POSTGRES_ULR", "postgres://u:hunter2@h/db",
			[]string{"WALPOST_POSTGRES_ULR", "WALPOST_POSTGRES_URL"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, with(minimalEnv, tt.variable, tt.value), "", NeedAll)
			if err == nil {
				t.Fatalf("%s=%s accepted", tt.variable, tt.value)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %q:\n%v", w, err)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error shows the password: %v", err)
			}
		})
	}
	for _, allowed := range []string{"WALPOST_STACK_PG_PORT", "WALPOST_STACK_ANYTHING_NEW", "WALPOST_REQUIRE_STACK",
		"WALPOST_SOAK", "WALPOST_SOAK_SEED", "WALPOST_NEMESIS_SEEDS", "WALPOST_NEMESIS_DURATION"} {
		t.Run("allowed "+allowed, func(t *testing.T) {
			if _, err := load(t, with(minimalEnv, allowed, "1"), "", NeedAll); err != nil {
				t.Fatalf("%s refused: %v", allowed, err)
			}
		})
	}
}

// TestConfigTypeErrorsNameEverything: a value that does not parse as its
// key's type names the key, the variable, the value, what is allowed and
// where it came from.
func TestConfigTypeErrorsNameEverything(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		yaml string
		want []string
	}{
		{name: "int from the environment", env: with(minimalEnv, "WALPOST_POISON_MAX_ATTEMPTS", "many"),
			want: []string{"poison.max_attempts", "WALPOST_POISON_MAX_ATTEMPTS", `"many"`, "an integer", "environment"}},
		{name: "bool from the environment", env: with(minimalEnv, "WALPOST_KAFKA_TLS_ENABLED", "yes please"),
			want: []string{"kafka.tls.enabled", "WALPOST_KAFKA_TLS_ENABLED", `"yes please"`, "true or false"}},
		{name: "duration from the environment", env: with(minimalEnv, "WALPOST_KAFKA_LINGER", "banana"),
			want: []string{"kafka.linger", "WALPOST_KAFKA_LINGER", `"banana"`, "a duration with a unit"}},
		{name: "duration without unit from the environment", env: with(minimalEnv, "WALPOST_KAFKA_FLUSH_TIMEOUT", "30"),
			want: []string{"kafka.flush_timeout", "WALPOST_KAFKA_FLUSH_TIMEOUT", `"30"`, "a duration with a unit"}},
		{name: "int64 from the file", env: minimalEnv, yaml: "pipeline:\n  max_inflight_bytes: lots\n",
			want: []string{"pipeline.max_inflight_bytes", "WALPOST_PIPELINE_MAX_INFLIGHT_BYTES", `"lots"`, "an integer", "config file"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, tt.env, tt.yaml, NeedAll)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %q:\n%v", w, err)
				}
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Errorf("error %v is not a *Error", err)
			}
		})
	}
}

// TestConfigPoisonBackoffBounds: poison.backoff 0s is refused (walpost
// always pauses between attempts) and so is a first pause above the cap.
func TestConfigPoisonBackoffBounds(t *testing.T) {
	for _, v := range []string{"0s", "31s"} {
		t.Run(v, func(t *testing.T) {
			_, err := load(t, with(minimalEnv, "WALPOST_POISON_BACKOFF", v), "", NeedAll)
			if err == nil {
				t.Fatalf("poison.backoff %s accepted", v)
			}
			for _, w := range []string{"poison.backoff", "WALPOST_POISON_BACKOFF", `"` + v + `"`, PoisonBackoffCap.String()} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %q:\n%v", w, err)
				}
			}
		})
	}
	for _, v := range []string{"1ms", "30s"} {
		if _, err := load(t, with(minimalEnv, "WALPOST_POISON_BACKOFF", v), "", NeedAll); err != nil {
			t.Errorf("poison.backoff %s refused: %v", v, err)
		}
	}
}

func TestClosestKey(t *testing.T) {
	for in, want := range map[string]string{
		"WALPOST_KAFKA_BROKER":     "WALPOST_KAFKA_BROKERS",
		"WALPOST_LOG_LEVL":         "WALPOST_LOG_LEVEL",
		"WALPOST_HTTP_LISTEN_ADDR": "WALPOST_HTTP_LISTEN",
	} {
		if got, ok := closestKey(in, func(k Key) string { return k.Env }); got.Env != want || !ok {
			t.Errorf("closestKey(%s) = %s %v, want %s", in, got.Env, ok, want)
		}
	}
	// Far from every key: no suggestion.
	for _, in := range []string{"WALPOST_CONFIG", "WALPOST_FOO", "WALPOST_TOPIC_NAME_PREFIX"} {
		if got, ok := closestKey(in, func(k Key) string { return k.Env }); ok {
			t.Errorf("closestKey(%s) = %s, want none", in, got.Env)
		}
	}
}

// TestConfigEffectiveRoundTrip: what `walpost config` prints loads back
// with --config into the same configuration, secrets redacted.
func TestConfigEffectiveRoundTrip(t *testing.T) {
	env := with(minimalEnv,
		"WALPOST_KAFKA_BROKERS", "a:1,b:2",
		"WALPOST_POISON_BACKOFF", "1500ms",
		"WALPOST_POSTGRES_HEARTBEAT_INTERVAL", "1m30s",
		"WALPOST_KAFKA_TLS_ENABLED", "true",
		"WALPOST_KAFKA_SASL_MECHANISM", "PLAIN",
		"WALPOST_KAFKA_SASL_USERNAME", "u",
		"WALPOST_KAFKA_SASL_PASSWORD", "hunter2",
		"WALPOST_KAFKA_TOPIC", "0123",
		"WALPOST_HTTP_LISTEN", "",
		"WALPOST_LINT_DISABLE", "OBX001,outbox-poll-order",
		"WALPOST_PIPELINE_MAX_INFLIGHT_BYTES", "9000000000",
	)
	cfg, err := load(t, env, "", NeedAll)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := WriteEffective(&out, cfg); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "hunter2") || strings.Contains(out.String(), "s3cret") {
		t.Fatalf("output shows a secret:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "redacted") {
		t.Errorf("output does not say secrets are redacted:\n%s", out.String())
	}
	back, err := load(t, map[string]string{}, out.String(), NeedAll)
	if err != nil {
		t.Fatalf("output does not load back: %v\n%s", err, out.String())
	}
	want := *cfg
	want.Postgres.URL = strings.Replace(want.Postgres.URL, "s3cret", RedactedValue, 1)
	want.Kafka.SASL.Password = RedactedValue
	if !reflect.DeepEqual(*back, want) {
		t.Errorf("loaded back\n%+v\nwant\n%+v\nfrom\n%s", *back, want, out.String())
	}
}
