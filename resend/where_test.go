package resend

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestParseWhereAccepts: plain boolean expressions over columns, with the
// allowed operators, functions and casts, pass, and their columns are
// collected.
func TestParseWhereAccepts(t *testing.T) {
	tests := []struct {
		in   string
		cols []string
	}{
		{"event_type = 'order.created'", []string{"event_type"}},
		{"  event_type = 'order.created'  ", []string{"event_type"}},
		{"event_type IN ('a', 'b') AND topic IS NOT NULL", []string{"event_type", "topic"}},
		{"NOT (event_type LIKE 'order.%') OR partition_key ILIKE 'eu-%'", []string{"event_type", "partition_key"}},
		{"payload->>'status' = 'paid' AND payload @> '{\"a\": 1}'::jsonb", []string{"payload"}},
		{"(payload #>> '{customer,id}')::int8 BETWEEN 10 AND 20", []string{"payload"}},
		{"lower(event_type) = 'x' AND length(idempotency_key) > 3", []string{"event_type", "idempotency_key"}},
		{"pg_catalog.upper(event_type) = 'X'", []string{"event_type"}},
		{"coalesce(topic, 'orders') = 'orders'", []string{"topic"}},
		{"CASE WHEN topic IS NULL THEN true ELSE attempts > 0 END", []string{"attempts", "topic"}},
		{"event_type IS DISTINCT FROM 'x' AND sent_at IS NULL", []string{"event_type", "sent_at"}},
		{"idempotency_key = ANY(ARRAY['k1', 'k2'])", []string{"idempotency_key"}},
		{"created_at >= '2026-12-01T00:00:00Z'::timestamptz", []string{"created_at"}},
		{"headers ? 'traceparent'", []string{"headers"}},
		{"trim(event_type) = 'x'", []string{"event_type"}},
		{"substring(event_type from 1 for 5) = 'order'", []string{"event_type"}},
		{"event_type SIMILAR TO 'order.(created|paid)'", []string{"event_type"}},
		{"id = '00000000-0000-0000-0000-000000000000'::uuid", []string{"id"}},
		{"CAST(attempts AS int8) > 0 AND cast(topic as text) <> ''", []string{"attempts", "topic"}},
		{"created_at >= timestamptz '2026-12-01 10:00Z' AND created_at < '2026-12-02'::pg_catalog.timestamptz", []string{"created_at"}},
		{"attempts=-1 OR attempts<>-2 OR attempts >= .5e1", []string{"attempts"}},
		{"\"event_type\" = 'it''s' AND payload['a'] IS NOT NULL", []string{"event_type", "payload"}},
		{"nullif(topic, '') IS NULL AND greatest(attempts, 0) < 3", []string{"attempts", "topic"}},
		{"event_type LIKE 'order\\_%' OR topic = 'a\\' OR true", []string{"event_type", "topic"}},
		{"true", nil},
	}
	for _, tt := range tests {
		w, err := ParseWhere(tt.in)
		if err != nil {
			t.Errorf("ParseWhere(%q): %v", tt.in, err)
			continue
		}
		if !slices.Equal(w.Columns, tt.cols) {
			t.Errorf("ParseWhere(%q).Columns = %v, want %v", tt.in, w.Columns, tt.cols)
		}
		if w.SQL() != "("+strings.TrimSpace(tt.in)+")" {
			t.Errorf("ParseWhere(%q).SQL() = %q", tt.in, w.SQL())
		}
	}
}

// TestParseWhereRefuses: a subquery, a function that writes (or any not
// on the allowlist), a semicolon, a comment, a second statement, trailing
// clauses, and everything else that is not a plain boolean expression
// over the row are refused with a message naming --where, what and how
// to fix it. (Mutations: accepting SubLink, dropping the semicolon scan,
// or allowing every function each fail cases here.)
func TestParseWhereRefuses(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"", "empty"},
		{"created_at >= 'now'::timestamptz", "the clock"},
		{"created_at::date = 'Today'", "the clock"},
		{"event_type IN (SELECT event_type FROM outbox)", "a subquery (SELECT)"},
		{"EXISTS (SELECT 1 FROM pg_class)", "a subquery (EXISTS)"},
		{"event_type = (select 'x')", "a subquery (SELECT)"},
		{"idempotency_key = ANY(VALUES ('k'))", "a subquery (VALUES)"},
		{"nextval('s') > 0", "function nextval()"},
		{"pg_terminate_backend(42)", "function pg_terminate_backend()"},
		{"set_config('work_mem', '1GB', false) IS NOT NULL", "function set_config()"},
		{"lo_unlink(1) = 1", "function lo_unlink()"},
		{"pg_catalog.pg_sleep(10) IS NULL", "function pg_catalog.pg_sleep()"}, {"pg_catalog.outbox IS NULL", "pg_catalog.outbox"},
		{"public.lower(event_type) = 'x'", "qualified name"},
		{"pg_sleep(10) IS NULL", "function pg_sleep()"},
		{"count(*) > 0", "function count()"},
		{"lower(*) > 0", "(*)"},
		{"lower(event_type) OVER () = 'x'", "function over()"},
		{"\"lower\"(event_type) = 'x'", "call of a quoted name"},
		{"true; DELETE FROM outbox", "semicolon"},
		{"true;", "semicolon"},
		{"event_type = 'x' -- and the rest", "comment"},
		{"event_type = 'x' /* c */", "comment"},
		{"true ORDER BY 1", "a clause (ORDER)"},
		{"true LIMIT 1", "a clause (LIMIT)"},
		{"true GROUP BY 1", "a clause (GROUP)"},
		{"true UNION SELECT 1", "a clause (UNION)"},
		{"true) OR (true", "unbalanced )"},
		{"(true", "unclosed ("},
		{"payload['a'] = 'x']", "unbalanced ]"},
		{"event_type = $1", "$"},
		{"event_type = $$x$$", "$"},
		{"event_type = E'x\\'", "prefixed string"},
		{"event_type = U&'x'", "prefixed string"},
		{"event_type = 'x", "unterminated string"},
		{"event_type = 'a' \\ 'b'", "backslash"},
		{"created_at > now()", "function now()"},
		{"created_at > CURRENT_TIMESTAMP", "value of the session"},
		{"current_user = 'x'", "value of the session"},
		{"o.event_type = 'x'", "qualified name"},
		{"event_type::regclass IS NOT NULL", "cast to regclass"},
		{"event_type::public.mytype IS NOT NULL", "cast to public"},
		{"event_type::double precision > 0", "cast to double"},
		{"CAST(event_type AS regclass) IS NULL", "cast to regclass"},
		{"event_type === 'x'", "operator ==="},
		{"@ attempts > 1", "operator @"},
		{"event_type OPERATOR(public.=) 'x'", "word operator after event_type"},
		{"event_type COLLATE \"C\" = 'x'", "word collate after event_type"},
		{"(headers).x = 'y'", "field selection"},
		{"true\x00; DELETE FROM outbox", "NUL byte"},
		{"event_type = '\xff'", "UTF-8"},
		{"attempts = 1abc", "number followed by letters"},
	}
	for _, tt := range tests {
		_, err := ParseWhere(tt.in)
		if err == nil {
			t.Errorf("ParseWhere(%q) accepted it; want refused (%s)", tt.in, tt.want)
			continue
		}
		if !errors.Is(err, ErrWhere) || !strings.Contains(err.Error(), "--where") || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseWhere(%q) = %v; want ErrWhere naming --where and %q", tt.in, err, tt.want)
		}
	}
}

// TestParseWhereDepth: a deeply nested predicate is refused, not walked
// without bound.
func TestParseWhereDepth(t *testing.T) {
	in := strings.Repeat("NOT (", 200) + "true" + strings.Repeat(")", 200)
	if _, err := ParseWhere(in); err == nil || !strings.Contains(err.Error(), "nested") {
		t.Errorf("ParseWhere(200 NOTs) = %v, want refused as nested", err)
	}
}

// TestWhereCheckColumns: a column the table does not have is refused, and
// the message lists those it has.
func TestWhereCheckColumns(t *testing.T) {
	w, err := ParseWhere("evnt_type = 'x'")
	if err != nil {
		t.Fatal(err)
	}
	cols := []string{"id", "idempotency_key", "event_type"}
	err = w.CheckColumns(`"public"."outbox"`, cols)
	if err == nil || !errors.Is(err, ErrWhere) || !strings.Contains(err.Error(), `"evnt_type"`) || !strings.Contains(err.Error(), "event_type, id, idempotency_key") {
		t.Errorf("CheckColumns = %v, want the unknown column and the table's columns", err)
	}
	w, _ = ParseWhere("event_type = 'x'")
	if err := w.CheckColumns(`"public"."outbox"`, cols); err != nil {
		t.Errorf("CheckColumns of a known column: %v", err)
	}
}

// FuzzParseWhere: the checker never panics, and whatever it accepts
// cannot end the parentheses it is embedded in: embedded between more
// SQL, it is accepted again with the same columns.
func FuzzParseWhere(f *testing.F) {
	for _, s := range []string{"event_type = 'x'", "true) OR (true", "a -- b", "x; y", "lower(a) IN ('a')", "$$x$$ = a", "a @> '{}'::jsonb", "\"a\"\"b\" = 'c''d'"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		w, err := ParseWhere(in)
		if err != nil {
			return
		}
		e, err := ParseWhere("a AND " + w.SQL() + " AND b")
		if err != nil {
			t.Fatalf("accepted %q, but embedded it is refused: %v", in, err)
		}
		want := append(slices.Clone(w.Columns), "a", "b")
		slices.Sort(want)
		want = slices.Compact(want)
		if !slices.Equal(e.Columns, want) {
			t.Fatalf("accepted %q (columns %v), but embedded its columns are %v", in, w.Columns, e.Columns)
		}
	})
}
