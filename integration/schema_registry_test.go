package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
)

// registryURL is the stack's schema registry (scripts/stack.sh up with
// WALPOST_STACK_REGISTRY=1); the tests that need it skip without it, or
// fail under WALPOST_REQUIRE_REGISTRY=1.
func registryURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("WALPOST_STACK_REGISTRY_URL")
	if u == "" {
		msg := "WALPOST_STACK_REGISTRY_URL unset: run WALPOST_STACK_REGISTRY=1 scripts/stack.sh up (or scripts/stack.sh registry-start) and source the stack's env"
		if os.Getenv("WALPOST_REQUIRE_REGISTRY") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return u
}

// registryClient is the tests' own client of the registry: a minute per
// request, since the registry's first Protobuf schema compiles in a JVM
// that shares the CPUs with the rest of the suite (franz-go's default is
// shorter).
func registryClient(url string) (*sr.Client, error) {
	return sr.NewClient(sr.URLs(url), sr.HTTPClient(&http.Client{Timeout: time.Minute}))
}

// decoded is a record read back by confluent-kafka's own deserializer.
type decoded struct {
	Key         string
	Value       map[string]any
	SchemaID    int
	KeySchemaID int
}

// consumeDecoded reads topic with librdkafka and decodes each value with
// confluent-kafka's Schema Registry deserializer of format (a client
// nobody here wrote, fetching the writer schema by the id the record
// carries), until expect records arrived; with keyFormat the keys too.
func consumeDecoded(t testing.TB, registry, format, keyFormat, topic string, expect int) []decoded {
	t.Helper()
	cmd := exec.Command(filepath.Join(repoRoot, "scripts", "rdkafka.sh"), "consume",
		"--brokers", strings.Join(brokers, ","), "--topic", topic, "--expect", fmt.Sprint(expect),
		"--idle", "20", "--timeout", "120", "--registry", registry, "--format", format, "--key-format", keyFormat)
	cmd.Dir = repoRoot
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var out []decoded
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var m struct {
			Key         string `json:"key"`
			Value       string `json:"value"`
			SchemaID    int    `json:"schema_id"`
			KeySchemaID int    `json:"key_schema_id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("consumer printed %q: %v", sc.Text(), err)
		}
		d := decoded{Key: m.Key, SchemaID: m.SchemaID, KeySchemaID: m.KeySchemaID}
		if err := json.Unmarshal([]byte(m.Value), &d.Value); err != nil {
			t.Fatalf("decoded value %q: %v", m.Value, err)
		}
		out = append(out, d)
	}
	if err != nil {
		t.Fatalf("confluent-kafka %s consumer: %v\n%s", format, err, stderr.String())
	}
	return out
}

// TestSchemaRegistryFormats: with schema_registry.value_format avro,
// json_schema and protobuf, walpost frames each row's payload with its
// topic's latest schema in a real registry (Apicurio Registry's
// Confluent API), confluent-kafka's deserializers decode every record
// against that registry, and the one row whose payload breaks the schema
// is quarantined with error class schema instead of reaching Kafka. With
// avro and json_schema the keys are framed too (schema_registry.key_format)
// and decoded by the same deserializers.
func TestSchemaRegistryFormats(t *testing.T) {
	t.Parallel()
	url := registryURL(t)
	for _, tc := range []struct {
		format  string
		typ     sr.SchemaType
		schema  string
		valid   func(i int) string // the payload of row i
		decoded func(i int) map[string]any
		invalid string
		key     string // the key schema (subject <topic>-key); "": keys stay text
	}{
		{
			format: "avro", typ: sr.TypeAvro,
			schema: `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"long"},{"name":"item","type":"string"},{"name":"note","type":["null","string"],"default":null}]}`,
			valid: func(i int) string {
				if i%2 == 0 {
					return fmt.Sprintf(`{"id": %d, "item": "book", "note": {"string": "n%d"}}`, i, i)
				}
				return fmt.Sprintf(`{"id": %d, "item": "book", "note": null}`, i)
			},
			decoded: func(i int) map[string]any {
				m := map[string]any{"id": float64(i), "item": "book", "note": nil}
				if i%2 == 0 {
					m["note"] = fmt.Sprintf("n%d", i)
				}
				return m
			},
			invalid: `{"id": "not a long", "item": "book", "note": null}`,
			key:     `"string"`,
		},
		{
			format: "json_schema", typ: sr.TypeJSON,
			schema: `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"id":{"type":"integer"},"item":{"type":"string"}},"required":["id","item"],"additionalProperties":false}`,
			valid:  func(i int) string { return fmt.Sprintf(`{"id": %d, "item": "book"}`, i) },
			decoded: func(i int) map[string]any {
				return map[string]any{"id": float64(i), "item": "book"}
			},
			invalid: `{"id": 3, "item": "book", "colour": "red"}`,
			key:     `{"$schema":"http://json-schema.org/draft-07/schema#","type":"string","pattern":"^k-"}`,
		},
		{
			format: "protobuf", typ: sr.TypeProtobuf,
			schema: "syntax = \"proto3\";\npackage shop;\nmessage Order {\n  int64 id = 1;\n  string item = 2;\n}\n",
			// Protobuf's JSON mapping writes int64 as a string; id 0 would be
			// the default, which the decoded message leaves out.
			valid: func(i int) string { return fmt.Sprintf(`{"id": "%d", "item": "book"}`, i+1) },
			decoded: func(i int) map[string]any {
				return map[string]any{"id": fmt.Sprint(i + 1), "item": "book"}
			},
			invalid: `{"id": "4", "item": 17}`,
		},
	} {
		t.Run(tc.format, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, fixtureOpts{partitions: 1})
			ctx := context.Background()
			cl, err := registryClient(url)
			if err != nil {
				t.Fatal(err)
			}
			ss, err := cl.CreateSchema(ctx, f.Topic+"-value", sr.Schema{Schema: tc.schema, Type: tc.typ})
			if err != nil {
				t.Fatalf("register the %s schema: %v", tc.format, err)
			}
			env := []string{"WALPOST_SCHEMA_REGISTRY_VALUE_FORMAT=" + tc.format, "WALPOST_SCHEMA_REGISTRY_URL=" + url,
				"WALPOST_POISON_MAX_ATTEMPTS=2", "WALPOST_POISON_BACKOFF=10ms"}
			keyFormat, keyID := "", 0
			if tc.key != "" {
				ks, err := cl.CreateSchema(ctx, f.Topic+"-key", sr.Schema{Schema: tc.key, Type: tc.typ})
				if err != nil {
					t.Fatalf("register the %s key schema: %v", tc.format, err)
				}
				keyFormat, keyID = tc.format, ks.ID
				env = append(env, "WALPOST_SCHEMA_REGISTRY_KEY_FORMAT="+tc.format)
			}
			p := f.start(env...)
			if !p.waitLog("msg=streaming", 30*time.Second) {
				t.Fatal("walpost did not stream")
			}
			const n = 6
			bad := fmt.Sprintf("k-%s-bad", tc.format)
			tx, err := f.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < n; i++ {
				if i == n/2 {
					if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES ($1, $2)`, f.Table), bad, tc.invalid); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES ($1, $2)`, f.Table), fmt.Sprintf("k-%d", i), tc.valid(i)); err != nil {
					t.Fatal(err)
				}
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			recs := consumeDecoded(t, url, tc.format, keyFormat, f.Topic, n)
			if len(recs) != n {
				t.Fatalf("%d records decoded, want %d: %+v", len(recs), n, recs)
			}
			for i, r := range recs {
				want := tc.decoded(i)
				if r.Key != fmt.Sprintf("k-%d", i) || r.SchemaID != ss.ID || r.KeySchemaID != keyID || fmt.Sprint(r.Value) != fmt.Sprint(want) {
					t.Errorf("record %d: key %s (schema id %d), schema id %d, value %v; want k-%d (%d), %d, %v", i, r.Key, r.KeySchemaID, r.SchemaID, r.Value, i, keyID, ss.ID, want)
				}
			}
			var rows []struct {
				Key   string `json:"idempotency_key"`
				Class string `json:"error_class"`
				Error string `json:"error"`
			}
			waitFor(t, 30*time.Second, "the invalid payload in the poison table", func() bool {
				out, err := walpostOutput(t, f.env(), "poison", "list", "--json")
				if err != nil {
					t.Fatalf("poison list: %v: %s", err, out)
				}
				if err := json.Unmarshal([]byte(out), &rows); err != nil {
					t.Fatalf("poison list --json: %v: %s", err, out)
				}
				return len(rows) > 0
			})
			if len(rows) != 1 || rows[0].Key != bad || rows[0].Class != "schema" {
				t.Fatalf("poison rows %+v, want one: %s with class schema", rows, bad)
			}
			t.Logf("quarantined %s: %s", rows[0].Key, rows[0].Error)
			if !p.waitLog("idempotency_key="+bad, 5*time.Second) {
				t.Errorf("no log line names the quarantined key %s", bad)
			}
		})
	}
}

// TestSchemaRegistryIDHeader: with schema_registry.schema_id_header, a row
// whose headers name a schema id is framed with that schema (here the
// subject's first version), the others with the subject's latest; both
// decode with confluent-kafka's AvroDeserializer; a row naming an id the
// registry does not know is quarantined with class schema.
func TestSchemaRegistryIDHeader(t *testing.T) {
	t.Parallel()
	url := registryURL(t)
	f := newFixture(t, fixtureOpts{partitions: 1})
	ctx := context.Background()
	cl, err := registryClient(url)
	if err != nil {
		t.Fatal(err)
	}
	v1, err := cl.CreateSchema(ctx, f.Topic+"-value", sr.Schema{Type: sr.TypeAvro,
		Schema: `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"long"}]}`})
	if err != nil {
		t.Fatal(err)
	}
	v2, err := cl.CreateSchema(ctx, f.Topic+"-value", sr.Schema{Type: sr.TypeAvro,
		Schema: `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"long"},{"name":"qty","type":"int","default":1}]}`})
	if err != nil {
		t.Fatal(err)
	}
	p := f.start("WALPOST_SCHEMA_REGISTRY_VALUE_FORMAT=avro", "WALPOST_SCHEMA_REGISTRY_URL="+url,
		"WALPOST_SCHEMA_REGISTRY_SCHEMA_ID_HEADER=schema_id", "WALPOST_POISON_MAX_ATTEMPTS=1")
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not stream")
	}
	rows := []struct{ key, payload, headers string }{
		{"k-0", `{"id": 0}`, fmt.Sprintf(`{"schema_id": "%d"}`, v1.ID)},
		{"k-1", `{"id": 1, "qty": 5}`, `{}`},
		{"k-bad", `{"id": 2}`, `{"schema_id": "999999"}`},
		{"k-2", `{"id": 2}`, fmt.Sprintf(`{"schema_id": "%d"}`, v1.ID)},
	}
	for _, r := range rows {
		mustExec(t, f.Pool, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload, headers) VALUES ($1, $2, $3::jsonb)`, f.Table), r.key, r.payload, r.headers)
	}
	recs := consumeDecoded(t, url, "avro", "", f.Topic, 3)
	want := []decoded{
		{Key: "k-0", SchemaID: v1.ID, Value: map[string]any{"id": float64(0)}},
		{Key: "k-1", SchemaID: v2.ID, Value: map[string]any{"id": float64(1), "qty": float64(5)}},
		{Key: "k-2", SchemaID: v1.ID, Value: map[string]any{"id": float64(2)}},
	}
	if fmt.Sprint(recs) != fmt.Sprint(want) {
		t.Fatalf("decoded %+v\nwant %+v", recs, want)
	}
	var poisoned []struct {
		Key   string `json:"idempotency_key"`
		Class string `json:"error_class"`
	}
	waitFor(t, 30*time.Second, "k-bad in the poison table", func() bool {
		out, err := walpostOutput(t, f.env(), "poison", "list", "--json")
		if err != nil {
			t.Fatalf("poison list: %v: %s", err, out)
		}
		if err := json.Unmarshal([]byte(out), &poisoned); err != nil {
			t.Fatalf("poison list --json: %v: %s", err, out)
		}
		return len(poisoned) > 0
	})
	if len(poisoned) != 1 || poisoned[0].Key != "k-bad" || poisoned[0].Class != "schema" {
		t.Fatalf("poison rows %+v, want k-bad with class schema", poisoned)
	}
}

// TestSchemaRegistrySubjectMissing: a record whose subject has no schema
// stops forwarding with an error that says to register it; nothing is
// quarantined and the slot stays before the record; once the schema is
// registered walpost goes on and the records decode.
func TestSchemaRegistrySubjectMissing(t *testing.T) {
	t.Parallel()
	url := registryURL(t)
	f := newFixture(t, fixtureOpts{partitions: 1})
	ctx := context.Background()
	p := f.start("WALPOST_SCHEMA_REGISTRY_VALUE_FORMAT=json_schema", "WALPOST_SCHEMA_REGISTRY_URL="+url)
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not stream")
	}
	mustExec(t, f.Pool, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES ('s-1', '{"id": 1}'), ('s-2', '{"id": 2}')`, f.Table))
	stuckEnd := f.currentWAL()
	if !p.waitLog("the schema registry has no usable schema for topic", 60*time.Second) || !p.waitLog("register the subject's schema", time.Second) {
		t.Fatal("forwarding did not stop with an error saying to register the subject's schema")
	}
	if held, _, _ := f.slotState(); held >= stuckEnd {
		t.Fatalf("slot confirmed %s past the unframed records (end %s)", held, stuckEnd)
	}
	var n int
	if err := f.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s`, f.PoisonTable)).Scan(&n); err != nil || n != 0 {
		t.Fatalf("poison rows %d (%v), want 0", n, err)
	}
	cl, err := registryClient(url)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := cl.CreateSchema(ctx, f.Topic+"-value", sr.Schema{Type: sr.TypeJSON,
		Schema: `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}`})
	if err != nil {
		t.Fatal(err)
	}
	recs := consumeDecoded(t, url, "json_schema", "", f.Topic, 2)
	want := []decoded{{Key: "s-1", SchemaID: ss.ID, Value: map[string]any{"id": float64(1)}}, {Key: "s-2", SchemaID: ss.ID, Value: map[string]any{"id": float64(2)}}}
	if fmt.Sprint(recs) != fmt.Sprint(want) {
		t.Fatalf("decoded %+v\nwant %+v", recs, want)
	}
	waitFor(t, 60*time.Second, "slot past the records", func() bool {
		lsn, _, _ := f.slotState()
		return lsn >= stuckEnd
	})
}
