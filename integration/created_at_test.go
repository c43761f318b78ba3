package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestCreatedAtRendering: with a URL that asks for another TimeZone and
// DateStyle in lower case, walpost run still renders created_at as
// documented: RFC 3339 in UTC, exact for historic offsets with seconds,
// infinity as written, BC and years past 9999 as ISO 8601 expanded years.
func TestCreatedAtRendering(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1})
	sep := "?"
	if strings.Contains(pgURL, "?") {
		sep = "&"
	}
	p := f.start("WALPOST_POSTGRES_URL=" + pgURL + sep + "timezone=America/New_York&datestyle=SQL")
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not stream")
	}
	ctx := context.Background()
	rows := map[string]string{ // created_at input → header
		"2026-11-29 22:50:51.123456+00":        "2026-11-29T22:50:51.123456Z",
		"2026-07-01 12:00:00-04":               "2026-07-01T16:00:00Z",
		"1850-01-01 00:00:00 Europe/Amsterdam": "1849-12-31T23:40:28Z", // LMT +00:19:32
		"infinity":                             "infinity",
		"-infinity":                            "-infinity",
		"0044-03-15 12:00:00+00 BC":            "-0043-03-15T12:00:00Z",
		"10000-01-01 00:00:00.5+00":            "+10000-01-01T00:00:00.5Z",
	}
	byKey := map[string]string{}
	i := 0
	for in, want := range rows {
		key := fmt.Sprintf("c-%d", i)
		i++
		byKey[key] = want
		mustExec(t, f.Pool, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload, created_at) VALUES ($1, '{}', $2::timestamptz)`, f.Table), key, in)
		// The Amsterdam instant, from PostgreSQL's own tz database.
		if strings.Contains(in, "Amsterdam") {
			var utc string
			if err := f.Pool.QueryRow(ctx, `SELECT to_char($1::timestamptz AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')`, in).Scan(&utc); err != nil {
				t.Fatal(err)
			}
			byKey[key] = utc
		}
	}
	recs := f.consumeAll(t, len(byKey), time.Minute)
	seen := map[string]bool{}
	for _, r := range recs {
		want, ok := byKey[r.Key]
		if !ok {
			t.Errorf("unexpected record %q", r.Key)
			continue
		}
		seen[r.Key] = true
		if got := r.Headers["created_at"]; got != want {
			t.Errorf("%s: created_at header %q, want %q", r.Key, got, want)
		}
	}
	if len(seen) != len(byKey) {
		t.Fatalf("delivered %d of %d records", len(seen), len(byKey))
	}
}

// TestPoisonListAndReplayUnusualCreatedAt: poison rows whose created_at is
// infinity, -infinity, BC or past 9999 are listed (text and JSON) and
// replayed with the documented created_at header; a key with a comma is
// replayed whole.
func TestPoisonListAndReplayUnusualCreatedAt(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1})
	rows := map[string][2]string{ // key → created_at, header
		"inf,1":  {"infinity", "infinity"},
		"ninf":   {"-infinity", "-infinity"},
		"bc":     {"0044-03-15 12:00:00+00 BC", "-0043-03-15T12:00:00Z"},
		"future": {"10000-01-01 00:00:00+00", "+10000-01-01T00:00:00Z"},
		"plain":  {"2026-11-29 22:50:51.5+00", "2026-11-29T22:50:51.5Z"},
	}
	for key, r := range rows {
		mustExec(t, f.Pool, fmt.Sprintf(`INSERT INTO %s (idempotency_key, outbox_id, payload, created_at, topic, attempts, last_error, error_class, commit_lsn)
			VALUES ($1, gen_random_uuid(), '{"n": 1}', $2::timestamptz, $3, 5, 'refused', 'MESSAGE_TOO_LARGE', '0/16B3748')`, f.PoisonTable), key, r[0], f.Topic)
	}
	if out, err := walpostOutput(t, f.env(), "poison", "list"); err != nil || !strings.Contains(out, "inf,1") {
		t.Fatalf("poison list: %v:\n%s", err, out)
	}
	out, err := walpostOutput(t, f.env(), "poison", "list", "--json")
	if err != nil {
		t.Fatalf("poison list --json: %v:\n%s", err, out)
	}
	var listed []struct {
		Key       string `json:"idempotency_key"`
		CreatedAt string `json:"created_at"`
	}
	if err := json.Unmarshal([]byte(out), &listed); err != nil {
		t.Fatalf("poison list --json: %v:\n%s", err, out)
	}
	if len(listed) != len(rows) {
		t.Fatalf("listed %d rows, want %d:\n%s", len(listed), len(rows), out)
	}
	// created_at order: -infinity, BC, 2026, 10000, infinity.
	for i, key := range []string{"ninf", "bc", "plain", "future", "inf,1"} {
		if listed[i].Key != key || listed[i].CreatedAt != rows[key][1] {
			t.Errorf("row %d = %+v, want %s with created_at %q", i, listed[i], key, rows[key][1])
		}
	}
	if out, err := walpostOutput(t, f.env(), "poison", "replay", "--key", "inf,1", "--key", "bc"); err != nil || !strings.Contains(out, "replayed 2, failed 0") {
		t.Fatalf("poison replay --key inf,1 --key bc: %v:\n%s", err, out)
	}
	recs := f.consumeAll(t, 2, time.Minute)
	got := map[string]string{}
	for _, r := range recs {
		got[r.Key] = r.Headers["created_at"]
		if r.Headers["replayed_from_poison"] != "true" {
			t.Errorf("%s: no replayed_from_poison header: %v", r.Key, r.Headers)
		}
	}
	if len(got) != 2 || got["inf,1"] != "infinity" || got["bc"] != "-0043-03-15T12:00:00Z" {
		t.Errorf("replayed records' created_at = %v, want inf,1 → infinity and bc → -0043-03-15T12:00:00Z", got)
	}
}
