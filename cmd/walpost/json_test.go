package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/walpost/walpost/preflight"
)

// compileSchema compiles the JSON schema in file.
func compileSchema(t *testing.T, file string) *jsonschema.Schema {
	t.Helper()
	sch, err := jsonschema.NewCompiler().Compile(file)
	if err != nil {
		t.Fatalf("compile %s: %v", file, err)
	}
	return sch
}

// validateJSON validates doc against sch.
func validateJSON(t *testing.T, sch *jsonschema.Schema, doc []byte) {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatalf("not JSON: %v\n%s", err, doc)
	}
	if err := sch.Validate(inst); err != nil {
		t.Errorf("invalid against the schema: %v\n%s", err, doc)
	}
}

// run runs walpost with args and returns stdout, stderr and the exit status.
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	root := newRootCommand()
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	code := execute(context.Background(), root, args, &stderr)
	return stdout.String(), stderr.String(), code
}

// TestCheckJSONSchema: check --json prints one object valid against
// schema/check.schema.json, with the fix split off each FAIL's detail,
// and exits 1 as the text output does when a check fails. (Mutation:
// dropping "fix" from checkJSON fails the schema's required list.)
func TestCheckJSONSchema(t *testing.T) {
	clearWalpostEnv(t)
	sch := compileSchema(t, "schema/check.schema.json")
	t.Setenv("WALPOST_POSTGRES_URL", "postgres://walpost:secret@127.0.0.1:1/walpost")
	t.Setenv("WALPOST_KAFKA_BROKERS", "127.0.0.1:1")
	out, stderr, code := run(t, "check", "--json")
	if code != 1 {
		t.Errorf("exit %d, want 1 (stderr %q)", code, stderr)
	}
	validateJSON(t, sch, []byte(out))
	if strings.Contains(out, "secret") {
		t.Errorf("the password is in the output:\n%s", out)
	}
	var got struct {
		Checks []checkJSON
		Failed int
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	eq(t, "failed", got.Failed, 2)
	eq(t, "checks[0].status", got.Checks[0].Status, "FAIL")
	eq(t, "checks[0].fix", got.Checks[0].Fix, "check host, port, user, password and database in postgres.url (WALPOST_POSTGRES_URL)")
	if strings.Contains(got.Checks[0].Detail, "\n") || strings.Count(got.Checks[0].Detail, "connection refused") != 1 {
		t.Errorf("the postgres detail is not one line with one attempt: %q", got.Checks[0].Detail)
	}
	// The text output: the same verdict, one line per check.
	text, _, code := run(t, "check")
	eq(t, "text exit", code, 1)
	eq(t, "text lines", strings.Count(text, "\n"), len(got.Checks))

	// Every status, as the schema allows it.
	var buf bytes.Buffer
	if err := writeCheckJSON(&buf, preflight.Result{Checks: []preflight.Check{
		{Name: "postgres", Status: preflight.OK, Detail: "connected"},
		{Name: "slot", Status: preflight.Warn, Detail: "risky; fix: ALTER SYSTEM SET x"},
		{Name: "publication", Status: preflight.Fail, Detail: `publication "p" also publishes update; fix: ALTER PUBLICATION p SET (publish = 'insert')`},
		{Name: "kafka", Status: preflight.Skip, Detail: "no Kafka client"},
	}}); err != nil {
		t.Fatal(err)
	}
	validateJSON(t, sch, buf.Bytes())
	if !strings.Contains(buf.String(), `"fix": "ALTER PUBLICATION p SET (publish = 'insert')"`) {
		t.Errorf("fix not split off:\n%s", buf.String())
	}
}

// TestStatusJSONError: status --json that cannot connect prints
// {"error": …} on stdout and exits 1. (Mutation: returning before the
// error object is written leaves stdout empty.)
func TestStatusJSONError(t *testing.T) {
	clearWalpostEnv(t)
	t.Setenv("WALPOST_POSTGRES_URL", "postgres://walpost:secret@127.0.0.1:1/walpost")
	out, stderr, code := run(t, "status", "--json")
	eq(t, "exit", code, 1)
	var got map[string]string
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%s", err, out)
	}
	if e := got["error"]; !strings.HasPrefix(e, "cannot connect to PostgreSQL") || strings.Contains(e, "secret") || strings.Contains(e, "\n") || len(got) != 1 {
		t.Errorf(`stdout %q, want only {"error": "cannot connect to PostgreSQL …"}, one line, no password`, out)
	}
	if !strings.Contains(stderr, "cannot connect to PostgreSQL") {
		t.Errorf("stderr lacks the message: %q", stderr)
	}
	// An invalid config too.
	t.Setenv("WALPOST_LOG_LEVEL", "loud")
	out, _, code = run(t, "status", "--json")
	if code != 1 || !strings.Contains(out, `"error": "invalid config: log.level`) {
		t.Errorf("invalid config: exit %d, stdout %q", code, out)
	}
}

// TestVersionJSON: version --json is an object of the version's parts.
func TestVersionJSON(t *testing.T) {
	clearWalpostEnv(t)
	oldV, oldC, oldD := version, commit, date
	t.Cleanup(func() { version, commit, date = oldV, oldC, oldD })
	version, commit, date = "v9.8.7", "0123456789abcdef0123456789abcdef01234567", "2026-12-01T10:00:00Z"
	out, _, code := run(t, "version", "--json")
	eq(t, "exit", code, 0)
	var got map[string]string
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	eq(t, "version", got["version"], "v9.8.7")
	eq(t, "commit", got["commit"], commit)
	eq(t, "date", got["date"], date)
	if !strings.HasPrefix(got["go_version"], "go1.") {
		t.Errorf("go_version %q", got["go_version"])
	}
}

// TestMigratePrintSQL: migrate --print-sql prints the migrations for the
// configured names and connects nowhere (no postgres.url needed); the
// debezium profile leaves the outbox's CREATE TABLE out. (Mutation:
// printing migrations.FS()'s default names fails the events.outbox
// assertion.)
func TestMigratePrintSQL(t *testing.T) {
	clearWalpostEnv(t)
	t.Setenv("WALPOST_POSTGRES_TABLE", "events.outbox")
	t.Setenv("WALPOST_POSTGRES_PUBLICATION", "events_pub")
	out, stderr, code := run(t, "migrate", "--print-sql")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"-- walpost migrate: 00001_outbox.sql\n",
		"CREATE TABLE IF NOT EXISTS events.outbox (",
		"CREATE TABLE IF NOT EXISTS poison_outbox (",
		`CREATE PUBLICATION "events_pub" FOR TABLE events.outbox WITH (publish = 'insert');`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "+goose Down") || strings.Contains(out, "DROP TABLE") {
		t.Errorf("output has Down migrations")
	}
	t.Setenv("WALPOST_MAPPING_PROFILE", "debezium")
	out, _, _ = run(t, "migrate", "--print-sql")
	if strings.Contains(out, "CREATE TABLE IF NOT EXISTS events.outbox") {
		t.Errorf("debezium profile: the user's outbox table is created")
	}
}

// TestOneLine: pgx's per-attempt lines fold into one line, each attempt
// once, the text after the last attempt kept.
func TestOneLine(t *testing.T) {
	in := "cannot connect (failed to connect to `user=w database=w`:\n\t127.0.0.1:1 (localhost): dial error: refused\n\t127.0.0.1:1 (localhost): dial error: refused\n\t[::1]:1 (localhost): dial error: refused); fix: check postgres.url"
	want := "cannot connect (failed to connect to `user=w database=w`: 127.0.0.1:1 (localhost): dial error: refused; [::1]:1 (localhost): dial error: refused); fix: check postgres.url"
	eq(t, "oneLine", oneLine(in), want)
	eq(t, "joined errors keep their lines", oneLine("a\nb"), "a\nb")
}

// TestConnectErrorsBlameTheConnection: a command that cannot reach
// PostgreSQL says so, on one line, and names postgres.url; never "read
// poison table" or goose's "failed to initialize". (Mutation: removing the
// Ping of openPoisonStore fails the poison cases with "read poison table".)
func TestConnectErrorsBlameTheConnection(t *testing.T) {
	clearWalpostEnv(t)
	t.Setenv("WALPOST_POSTGRES_URL", "postgres://walpost:secret@127.0.0.1:1/walpost?sslmode=prefer")
	t.Setenv("WALPOST_KAFKA_BROKERS", "127.0.0.1:1")
	for _, args := range [][]string{{"poison", "list"}, {"poison", "replay", "--all"}, {"migrate"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			_, stderr, code := run(t, args...)
			eq(t, "exit", code, 1)
			if !strings.Contains(stderr, "cannot connect to PostgreSQL (") || !strings.Contains(stderr, "fix: check host, port, user, password and database in postgres.url (WALPOST_POSTGRES_URL)") ||
				strings.Contains(stderr, "poison table") || strings.Contains(stderr, "failed to initialize") ||
				strings.Count(stderr, "\n") != 1 || strings.Contains(stderr, "secret") {
				t.Errorf("stderr %q, want one line that blames the connection", stderr)
			}
		})
	}
}
