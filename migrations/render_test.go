package migrations

import (
	"io/fs"
	"strings"
	"testing"
)

// TestRender: the default names give the schema of DESIGN.md, Contracts;
// other names replace every table, index, constraint and publication
// name; UserOutbox leaves the outbox table out.
func TestRender(t *testing.T) {
	read := func(n Names) string {
		t.Helper()
		fsys, err := render(n.withDefaults())
		if err != nil {
			t.Fatal(err)
		}
		var all []string
		for _, name := range []string{"00001_outbox.sql", "00002_poison_identity.sql", "00003_position.sql", "00004_position_recovering.sql"} {
			b, err := fs.ReadFile(fsys, name)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, string(b))
		}
		return strings.Join(all, "\n")
	}
	def := read(Names{})
	for _, want := range []string{
		"CREATE TABLE IF NOT EXISTS outbox (",
		"CREATE TABLE IF NOT EXISTS poison_outbox (",
		"CREATE INDEX IF NOT EXISTS poison_outbox_created_at ON poison_outbox (created_at);",
		"ADD CONSTRAINT poison_outbox_pkey PRIMARY KEY (outbox_id, commit_lsn);",
		"CREATE PUBLICATION walpost_outbox FOR TABLE outbox WITH (publish = 'insert');",
		"CREATE TABLE IF NOT EXISTS walpost_position (",
	} {
		if !strings.Contains(def, want) {
			t.Errorf("default schema lacks %q", want)
		}
	}
	if strings.Contains(def, "{{") {
		t.Error("default schema has an unrendered action")
	}
	if got := (Names{}).withDefaults().versionTable(); got != VersionTable {
		t.Errorf("default version table %s, want %s", got, VersionTable)
	}

	n := Names{Outbox: "app.events", Poison: "app.events_poison", Publication: "events_pub", UserOutbox: true}
	other := read(n)
	for _, want := range []string{
		"CREATE TABLE IF NOT EXISTS app.events_poison (",
		"CREATE INDEX IF NOT EXISTS events_poison_created_at ON app.events_poison (created_at);",
		"BEFORE DELETE ON app.events_poison",
		"BEFORE TRUNCATE ON app.events_poison",
		"ALTER TABLE app.events_poison DROP CONSTRAINT IF EXISTS events_poison_pkey;",
		"CREATE INDEX IF NOT EXISTS events_poison_idempotency_key ON app.events_poison (idempotency_key);",
		"CREATE PUBLICATION events_pub FOR TABLE app.events WITH (publish = 'insert');",
		"CREATE TABLE IF NOT EXISTS walpost_position (",
	} {
		if !strings.Contains(other, want) {
			t.Errorf("schema for %+v lacks %q", n, want)
		}
	}
	for _, bad := range []string{"poison_outbox ", "poison_outbox(", "walpost_outbox", "CREATE TABLE IF NOT EXISTS app.events (", "CREATE TABLE IF NOT EXISTS outbox"} {
		if strings.Contains(other, bad) {
			t.Errorf("schema for %+v has %q", n, bad)
		}
	}
	if got := n.withDefaults().versionTable(); got != VersionTable+"_app_events_poison" {
		t.Errorf("version table %s", got)
	}
}
