package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// sarifSchema is OASIS's SARIF 2.1.0 schema (errata 01), kept in the
// lint package's testdata.
const sarifSchema = "../../lint/testdata/sarif-schema-2.1.0.json"

// sarifLog is what the tests read of a SARIF log.
type sarifLog struct {
	Runs []struct {
		Results []struct {
			RuleID    string
			Locations []struct {
				PhysicalLocation struct {
					ArtifactLocation struct{ URI string }
					Region           struct{ StartLine int }
				}
			}
		}
		Invocations []struct {
			ExecutionSuccessful        bool
			ToolExecutionNotifications []json.RawMessage
		}
	}
}

// validateSARIF checks doc against the SARIF 2.1.0 schema and decodes it.
func validateSARIF(t *testing.T, doc []byte) sarifLog {
	t.Helper()
	validateJSON(t, compileSchema(t, sarifSchema), doc)
	var log sarifLog
	if err := json.Unmarshal(doc, &log); err != nil || len(log.Runs) != 1 {
		t.Fatalf("not one run: %v\n%s", err, doc)
	}
	return log
}

// TestLintDebeziumMapping: Debezium's own outbox DDL lints clean with
// mapping.profile=debezium (the key is the event id, the table postgres.table),
// and not with walpost's mapping, which wants an idempotency_key column.
// (Mutation: passing cfg.Mapping.KeyColumn for the debezium profile makes
// the first case exit 1: no UNIQUE on aggregateid.)
func TestLintDebeziumMapping(t *testing.T) {
	clearWalpostEnv(t)
	const ddl = "testdata/lint/debezium_outboxevent.sql"
	t.Setenv("WALPOST_POSTGRES_TABLE", "outboxevent")
	t.Setenv("WALPOST_MAPPING_PROFILE", "debezium")
	out, stderr, code := run(t, "lint", ddl)
	if code != 0 {
		t.Errorf("debezium profile: exit %d, want 0\n%s%s", code, out, stderr)
	}
	sarifOut, _, code := run(t, "lint", "--format", "sarif", ddl)
	eq(t, "sarif exit", code, 0)
	rep := validateSARIF(t, []byte(sarifOut))
	if n := len(rep.Runs[0].Results); n != 0 {
		t.Errorf("%d SARIF results, want none", n)
	}

	t.Setenv("WALPOST_MAPPING_PROFILE", "walpost")
	out, _, code = run(t, "lint", ddl)
	if code != 1 || !strings.Contains(out, "OBX001") || !strings.Contains(out, "no idempotency_key column") {
		t.Errorf("walpost profile: exit %d, want 1 with OBX001 on idempotency_key:\n%s", code, out)
	}
	// A custom key column.
	t.Setenv("WALPOST_MAPPING_KEY_COLUMN", "id")
	if out, _, code = run(t, "lint", ddl); code != 0 {
		t.Errorf("mapping.key_column=id: exit %d, want 0\n%s", code, out)
	}
}

// TestLintSARIF: findings and parse errors in SARIF, valid against the
// SARIF 2.1.0 schema, with the exit status of the text output.
func TestLintSARIF(t *testing.T) {
	clearWalpostEnv(t)
	out, _, code := run(t, "lint", "--format", "sarif", "testdata/lint/volatile_key.sql", "testdata/lint/missing.sql")
	eq(t, "exit", code, 2)
	rep := validateSARIF(t, []byte(out))
	run0 := rep.Runs[0]
	if len(run0.Results) != 1 || run0.Results[0].RuleID != "OBX009" {
		t.Fatalf("results %+v, want one OBX009", run0.Results)
	}
	loc := run0.Results[0].Locations[0].PhysicalLocation
	eq(t, "uri", loc.ArtifactLocation.URI, "testdata/lint/volatile_key.sql")
	eq(t, "line", loc.Region.StartLine, 1)
	if inv := run0.Invocations[0]; inv.ExecutionSuccessful || len(inv.ToolExecutionNotifications) != 1 {
		t.Errorf("the missing file is not an error notification of a failed invocation: %+v", inv)
	}
	if _, _, code := run(t, "lint", "--format", "xml", "testdata/lint/volatile_key.sql"); code != 2 {
		t.Errorf("--format xml: exit %d, want 2", code)
	}
	if _, _, code := run(t, "lint", "--json", "--format", "sarif", "testdata/lint/volatile_key.sql"); code != 2 {
		t.Errorf("--json --format sarif: exit %d, want 2", code)
	}
}
