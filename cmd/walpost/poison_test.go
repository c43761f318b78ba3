package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/walpost/walpost/poison"
)

// -update rewrites the golden files. Another test file of this package may
// declare the same flag; then that one is used.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite the golden files in testdata")
	}
}

func poisonGoldenUpdate() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// poisonRows are fixed rows: one replayed twice, with every optional column
// set and a long multi-line error; one never replayed, with every optional
// column NULL. Times are in other zones than UTC: the output is in UTC.
func poisonRows() []poison.Row {
	cet := time.FixedZone("CET", 3600)
	pst := time.FixedZone("PST", -8*3600)
	replayed := time.Date(2026, 12, 1, 9, 30, 0, 0, cet)
	pk, et, hs := "customer-7", "OrderCreated", `{"tenant": "acme"}`
	return []poison.Row{
		{
			IdempotencyKey: "order-42-created",
			OutboxID:       "5f0c6c8e-2d3b-4c1a-9a57-0d5e1c8b7a11",
			Topic:          "orders.v1",
			PartitionKey:   &pk,
			EventType:      &et,
			Payload:        `{"id": 42}`,
			Headers:        &hs,
			CreatedAt:      time.Date(2026, 11, 29, 23, 50, 51, 123456000, cet),
			Attempts:       5,
			LastError:      "MESSAGE_TOO_LARGE: message too large\n(record of about 2000000 bytes, topic \"orders.v1\" allows 1048588)",
			ErrorClass:     "MESSAGE_TOO_LARGE",
			CommitLSN:      "16/B374D848",
			PoisonedAt:     time.Date(2026, 11, 29, 23, 50, 53, 0, cet),
			ReplayedAt:     &replayed,
			ReplayCount:    2,
		},
		{
			IdempotencyKey: "invoice-7-paid",
			OutboxID:       "6a1d7d9f-3e4c-4d2b-8b68-1e6f2d9c8b22",
			Topic:          "walpost.events",
			Payload:        `{"invoice": 7}`,
			CreatedAt:      time.Date(2026, 11, 30, 1, 2, 3, 0, pst),
			Attempts:       3,
			LastError:      `outbox headers must be a JSON object of strings: header "a" is float64`,
			ErrorClass:     "INVALID_HEADERS",
			CommitLSN:      "16/B3750000",
			PoisonedAt:     time.Date(2026, 11, 30, 1, 2, 4, 500000000, pst),
		},
	}
}

// checkGolden compares got with testdata/name, or rewrites it with -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if poisonGoldenUpdate() {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (rerun with -update after an intended change and review the diff)\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// TestWritePoisonListGolden pins `walpost poison list` output, text and
// --json, for rows with and without optional columns, and for none.
func TestWritePoisonListGolden(t *testing.T) {
	tests := []struct {
		name   string
		rows   []poison.Row
		asJSON bool
		golden string
	}{
		{"json", poisonRows(), true, "poison_list.json.golden"},
		{"text", poisonRows(), false, "poison_list.txt.golden"},
		{"json empty", nil, true, "poison_list_empty.json.golden"},
		{"text empty", nil, false, "poison_list_empty.txt.golden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := poison.WriteList(&buf, tt.rows, tt.asJSON); err != nil {
				t.Fatalf("writePoisonList: %v", err)
			}
			checkGolden(t, tt.golden, buf.Bytes())
		})
	}
}

// TestWritePoisonListJSONShape: --json is an array (never null) whose
// objects have exactly the documented keys, with JSON null for NULL
// columns and times in UTC.
func TestWritePoisonListJSONShape(t *testing.T) {
	var buf bytes.Buffer
	if err := poison.WriteList(&buf, poisonRows(), true); err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
		t.Fatalf("--json output is not a JSON array: %v", err)
	}
	keys := []string{"idempotency_key", "topic", "event_type", "partition_key", "attempts", "error_class", "error",
		"commit_lsn", "created_at", "poisoned_at", "replayed_at", "replay_count", "outbox_id"}
	for i, o := range out {
		if len(o) != len(keys) {
			t.Errorf("row %d has %d keys, want %d: %v", i, len(o), len(keys), o)
		}
		for _, k := range keys {
			if _, ok := o[k]; !ok {
				t.Errorf("row %d lacks %q", i, k)
			}
		}
		for _, k := range []string{"created_at", "poisoned_at"} {
			if s, _ := o[k].(string); !strings.HasSuffix(s, "Z") {
				t.Errorf("row %d %s = %v, want UTC", i, k, o[k])
			}
		}
	}
	for _, k := range []string{"event_type", "partition_key", "replayed_at"} {
		if v, ok := out[1][k]; !ok || v != nil {
			t.Errorf("NULL %s = %v, want JSON null", k, v)
		}
	}
	buf.Reset()
	if err := poison.WriteList(&buf, nil, true); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(buf.String()); got != "[]" {
		t.Errorf("no rows: %q, want []", got)
	}
}

// The text table cuts long errors to 80 characters; the cut must not split
// a UTF-8 character (PostgreSQL and Kafka messages may be localized, and
// keys or topics in an error can be any text).
func TestWritePoisonListTruncatesOnCharacterBoundary(t *testing.T) {
	row := poisonRows()[1]
	row.LastError = strings.Repeat("a", 76) + "ééééééé" // é is two bytes: byte 77 is inside one
	var buf bytes.Buffer
	if err := poison.WriteList(&buf, []poison.Row{row}, false); err != nil {
		t.Fatal(err)
	}
	if !utf8.Valid(buf.Bytes()) {
		t.Errorf("text output is not valid UTF-8:\n%q", buf.String())
	}
}
