package lint

import (
	"slices"
	"strings"
	"testing"
)

// TestSuppression: "-- walpost-lint: ignore RULE reason" silences that
// rule on its own line and the next, by id or name, and nothing else; a
// suppression without a reason or of no rule is an error. (Mutation:
// accepting s.line == fd.Line-2 silences the finding two lines below and
// fails the "two lines below" case.)
func TestSuppression(t *testing.T) {
	const key = "INSERT INTO outbox (idempotency_key, payload) VALUES (gen_random_uuid()::text, '{}');"
	for _, tt := range []struct {
		name, src string
		rules     []string
		errs      int
	}{
		{"none", key, []string{"OBX009"}, 0},
		{"trailing, by id", key + " -- walpost-lint: ignore OBX009 heartbeat rows", nil, 0},
		{"line before, by name", "-- walpost-lint: ignore volatile-key heartbeat rows\n" + key, nil, 0},
		{"several rules", "-- walpost-lint: ignore OBX003,OBX009 heartbeat rows\n" + key, nil, 0},
		{"another rule", "-- walpost-lint: ignore OBX003 not this one\n" + key, []string{"OBX009"}, 0},
		{"two lines below", "-- walpost-lint: ignore OBX009 too far\n\n" + key, []string{"OBX009"}, 0},
		{"no reason", "-- walpost-lint: ignore OBX009\n" + key, []string{"OBX009"}, 1},
		{"no rule", "-- walpost-lint: ignore OBX999 typo\n" + key, []string{"OBX009"}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := lintString(t, Options{}, tt.src)
			if got := rulesOf(res); !slices.Equal(got, tt.rules) {
				t.Errorf("findings %v, want %v", got, tt.rules)
			}
			if len(res.Errors) != tt.errs {
				t.Errorf("errors %+v, want %d", res.Errors, tt.errs)
			}
			for _, e := range res.Errors {
				if e.Line != 1 || !strings.Contains(e.Message, "walpost-lint: ignore") {
					t.Errorf("error %+v does not point at the comment", e)
				}
			}
		})
	}
}

// TestKeyColumnOption: the idempotency key column is configurable; the
// rules judge that column (OBX001 on Debezium's id, OBX009 on it).
func TestKeyColumnOption(t *testing.T) {
	const ddl = "CREATE TABLE outboxevent (id uuid NOT NULL PRIMARY KEY, aggregateid varchar(255) NOT NULL, payload jsonb);\n"
	opts := Options{OutboxTable: "outboxevent", KeyColumn: "id"}
	if got := rulesOf(lintString(t, opts, ddl)); len(got) != 0 {
		t.Errorf("Debezium's table with key id: %v", got)
	}
	if got := rulesOf(lintString(t, Options{OutboxTable: "outboxevent"}, ddl)); !slices.Equal(got, []string{"OBX001"}) {
		t.Errorf("Debezium's table with the default key: %v, want OBX001", got)
	}
	ins := ddl + "INSERT INTO outboxevent (id, aggregateid, payload) VALUES (gen_random_uuid(), 'a', '{}');\n"
	if got := rulesOf(lintString(t, opts, ins)); !slices.Equal(got, []string{"OBX009"}) {
		t.Errorf("generated id as the key: %v, want OBX009", got)
	}
}
