package writer

import (
	"strings"
	"testing"
)

func TestNewTable(t *testing.T) {
	for _, tc := range []struct{ in, quoted string }{
		{"outbox", `"outbox"`},
		{"App.Outbox_1", `"app"."outbox_1"`},
		{"s$.t$", `"s$"."t$"`},
	} {
		tb, err := NewTable(tc.in)
		if err != nil {
			t.Fatalf("NewTable(%q): %v", tc.in, err)
		}
		if tb.String() != tc.quoted || !strings.HasPrefix(tb.insert, "INSERT INTO "+tc.quoted+" (") {
			t.Fatalf("NewTable(%q) = %s, insert %q; want %s", tc.in, tb, tb.insert, tc.quoted)
		}
	}
	if DefaultTable.String() != `"outbox"` {
		t.Fatalf("DefaultTable = %s", DefaultTable)
	}
	for _, bad := range []string{"", "a.b.c", `"outbox"`, "outbox; DROP TABLE accounts", "out box", ".outbox", "outbox.", "1outbox", strings.Repeat("x", 64)} {
		if _, err := NewTable(bad); err == nil || !strings.Contains(err.Error(), "unquoted identifier") {
			t.Errorf("NewTable(%q) err = %v, want a refusal", bad, err)
		}
	}
}

func TestMultiInsert(t *testing.T) {
	tb, _ := NewTable("s.o")
	got := tb.multiInsert(2)
	want := `INSERT INTO "s"."o" (idempotency_key, payload, topic, partition_key, event_type, headers) VALUES ($1, $2, $3, $4, $5, $6), ($7, $8, $9, $10, $11, $12)`
	if got != want {
		t.Fatalf("multiInsert(2) =\n%s\nwant\n%s", got, want)
	}
	if !strings.HasSuffix(tb.multiInsert(MaxRowsPerStatement), "$65532)") {
		t.Fatal("the largest statement does not end with parameter 65532")
	}
}
