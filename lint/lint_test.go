package lint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

func lintString(t *testing.T, opts Options, src string) Result {
	t.Helper()
	res, err := Lint(opts, []File{{Name: "t.sql", Src: []byte(src)}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func rulesOf(r Result) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, f.Rule)
	}
	return out
}

func TestRuleTable(t *testing.T) {
	ids, names := map[string]bool{}, map[string]bool{}
	idRE := regexp.MustCompile(`^OBX\d{3}$`)
	nameRE := regexp.MustCompile(`^[a-z]+(-[a-z]+)+$`)
	for _, r := range Rules() {
		if !idRE.MatchString(r.ID) || !nameRE.MatchString(r.Name) || r.Summary == "" || r.Fix == "" {
			t.Errorf("malformed rule %+v", r)
		}
		if ids[r.ID] || names[r.Name] {
			t.Errorf("duplicate rule %s %s", r.ID, r.Name)
		}
		ids[r.ID], names[r.Name] = true, true
		for _, q := range []string{r.ID, r.Name, strings.ToUpper(r.Name), strings.ToLower(r.ID), " " + r.ID + " "} {
			if got, ok := LookupRule(q); !ok || got.ID != r.ID {
				t.Errorf("LookupRule(%q) = %v, %v", q, got, ok)
			}
		}
	}
	if len(ids) != 10 {
		t.Errorf("want 10 rules, have %d", len(ids))
	}
}

// manual is the rule manual, docs/lint.md; README.md must link to it.
func manual(t *testing.T) string {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "](docs/lint.md)") {
		t.Error("README.md does not link to docs/lint.md")
	}
	b, err := os.ReadFile("../docs/lint.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestManualDocumentsEveryRule: docs/lint.md has a section per rule with a
// bad and a good example.
func TestManualDocumentsEveryRule(t *testing.T) {
	doc := manual(t)
	for _, r := range Rules() {
		head := "## " + r.ID + " `" + r.Name + "`"
		i := strings.Index(doc, head)
		if i < 0 {
			t.Errorf("docs/lint.md lacks the heading %q", head)
			continue
		}
		section := doc[i+len(head):]
		if j := strings.Index(section, "\n## "); j >= 0 {
			section = section[:j]
		}
		if !strings.Contains(section, "Bad:") || !strings.Contains(section, "Good:") || strings.Count(section, "```sql") < 2 {
			t.Errorf("docs/lint.md section of %s needs a Bad: and a Good: SQL example", r.ID)
		}
	}
	for _, key := range []string{"lint.disable", "postgres.table", "postgres.poison_table", "--json", "--disable"} {
		if !strings.Contains(doc, key) {
			t.Errorf("docs/lint.md does not mention %s", key)
		}
	}
}

// TestManualExamples lints every example of docs/lint.md: Bad: blocks must
// yield their section's rule, Good: blocks nothing at all.
func TestManualExamples(t *testing.T) {
	doc := manual(t)
	sectionRE := regexp.MustCompile(`(?m)^## (OBX\d{3}) `)
	blockRE := regexp.MustCompile("(?s)(Bad|Good):[^\\n]*\\n+```sql\\n(.*?)```")
	idx := sectionRE.FindAllStringSubmatchIndex(doc, -1)
	if len(idx) != len(Rules()) {
		t.Fatalf("found %d rule sections", len(idx))
	}
	for k, m := range idx {
		rule := doc[m[2]:m[3]]
		end := len(doc)
		if k+1 < len(idx) {
			end = idx[k+1][0]
		}
		for _, blk := range blockRE.FindAllStringSubmatch(doc[m[0]:end], -1) {
			res := lintString(t, Options{}, blk[2])
			if len(res.Errors) > 0 {
				t.Errorf("%s %s example does not parse: %+v\n%s", rule, blk[1], res.Errors, blk[2])
				continue
			}
			got := rulesOf(res)
			switch blk[1] {
			case "Bad":
				if len(got) == 0 || !strings.Contains(strings.Join(got, " "), rule) {
					t.Errorf("%s Bad example yields %v:\n%s", rule, got, blk[2])
				}
			case "Good":
				if len(got) > 0 {
					t.Errorf("%s Good example yields %v:\n%s%s", rule, got, blk[2], textOf(res))
				}
			}
		}
	}
}

func TestOptions(t *testing.T) {
	src := "DELETE FROM poison_outbox; TRUNCATE outbox_dead;"
	if got := rulesOf(lintString(t, Options{}, src)); len(got) != 1 {
		t.Errorf("defaults: %v", got)
	}
	if got := rulesOf(lintString(t, Options{PoisonTable: "outbox_dead"}, src)); len(got) != 1 {
		t.Errorf("custom poison table: %v", got)
	}
	if got := rulesOf(lintString(t, Options{PoisonTable: "ops.outbox_dead"}, "TRUNCATE other.outbox_dead; TRUNCATE ops.outbox_dead;")); len(got) != 1 {
		t.Errorf("qualified poison table matches its schema only: %v", got)
	}
	if got := rulesOf(lintString(t, Options{Disable: []string{"poison-no-delete"}}, src)); len(got) != 0 {
		t.Errorf("disabled by name: %v", got)
	}
	if got := rulesOf(lintString(t, Options{Disable: []string{"obx001, OBX005"}}, src)); len(got) != 0 {
		t.Errorf("comma-separated, case-insensitive ids: %v", got)
	}
	_, err := Lint(Options{Disable: []string{"OBX005", "no-such-rule"}}, nil)
	if !errors.Is(err, ErrUnknownRule) || !strings.Contains(err.Error(), "no-such-rule") {
		t.Errorf("unknown rule: %v", err)
	}
	var out bytes.Buffer
	code, err := Run(context.Background(), Options{Disable: []string{"OBX999"}}, []string{"testdata/good"}, &out, false)
	if code != ExitErrors || !errors.Is(err, ErrUnknownRule) {
		t.Errorf("Run with an unknown rule: %d %v", code, err)
	}
}

func TestRunPaths(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "a", "b", "x.SQL"), []byte("DELETE FROM poison_outbox;"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "a", "notes.txt"), []byte("DELETE FROM poison_outbox;"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "query.psql"), []byte("TRUNCATE poison_outbox;"), 0o644))

	var out bytes.Buffer
	// The directory is searched for *.sql; a file named explicitly is read
	// whatever its extension; a file named twice is linted once.
	code, err := Run(context.Background(), Options{}, []string{dir, filepath.Join(dir, "query.psql"), filepath.Join(dir, "a", "b", "x.SQL")}, &out, true)
	must(err)
	var res Result
	must(json.Unmarshal(out.Bytes(), &res))
	if code != ExitFindings || len(res.Findings) != 2 || len(res.Errors) != 0 {
		t.Fatalf("exit %d: %s", code, out.String())
	}

	out.Reset()
	missing := filepath.Join(dir, "missing.sql")
	code, err = Run(context.Background(), Options{}, []string{missing, filepath.Join(dir, "query.psql")}, &out, false)
	must(err)
	if code != ExitErrors || !strings.Contains(out.String(), missing+": error: cannot read file: no such file or directory") ||
		!strings.Contains(out.String(), "OBX005") {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}

	out.Reset()
	code, err = Run(context.Background(), Options{}, []string{filepath.Join(dir, "a", "notes.txt")}, &out, true)
	must(err)
	if code != ExitFindings {
		t.Errorf("explicit file: exit %d", code)
	}

	out.Reset()
	clean := t.TempDir()
	must(os.WriteFile(filepath.Join(clean, "ok.sql"), []byte("SELECT 1;"), 0o644))
	code, err = Run(context.Background(), Options{}, []string{clean}, &out, true)
	must(err)
	if code != ExitClean || strings.TrimSpace(out.String()) != `{
  "findings": [],
  "errors": []
}` {
		t.Errorf("clean JSON must carry empty arrays, got %d %q", code, out.String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, Options{}, []string{dir}, &out, false); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled context: %v", err)
	}
}

func TestPositions(t *testing.T) {
	// A byte-order mark is tolerated; columns count characters.
	res := lintString(t, Options{}, "\uFEFF-- é\nSELECT 'ééé', x FROM outbox LIMIT 1; DELETE FROM poison_outbox;")
	if len(res.Errors) > 0 || len(res.Findings) != 2 {
		t.Fatalf("%+v", res)
	}
	if f := res.Findings[0]; f.Rule != RuleOutboxPollOrder || f.Line != 2 || f.Column != 1 {
		t.Errorf("poll finding at %d:%d", f.Line, f.Column)
	}
	if f := res.Findings[1]; f.Rule != RulePoisonNoDelete || f.Line != 2 || f.Column != 38 {
		t.Errorf("delete finding at %d:%d, want 2:38", f.Line, f.Column)
	}
	// An error at the very end of the input.
	res = lintString(t, Options{}, "SELECT (1")
	if len(res.Errors) != 1 || res.Errors[0].Line != 1 || res.Errors[0].Column != 10 {
		t.Errorf("%+v", res.Errors)
	}
	// An empty file and a comment-only file are clean.
	for _, src := range []string{"", "-- nothing\n/* at all */"} {
		if r := lintString(t, Options{}, src); r.ExitCode() != ExitClean {
			t.Errorf("%q: %+v", src, r)
		}
	}
}

func TestTransactionTracking(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      int
	}{
		{"commit and chain keeps a block open", "BEGIN; INSERT INTO a VALUES (1); COMMIT AND CHAIN; INSERT INTO outbox VALUES ('k'); COMMIT;", 1},
		{"rollback ends the block", "BEGIN; INSERT INTO a VALUES (1); ROLLBACK; INSERT INTO outbox VALUES ('k');", 1},
		{"savepoints stay in the block", "BEGIN; INSERT INTO a VALUES (1); SAVEPOINT s; RELEASE SAVEPOINT s; INSERT INTO outbox VALUES ('k'); COMMIT;", 0},
		{"event before its write in one block", "BEGIN; INSERT INTO outbox VALUES ('k'); INSERT INTO a VALUES (1); COMMIT;", 0},
		{"write in the DO block itself", "DO $$ BEGIN INSERT INTO a VALUES (1); INSERT INTO outbox VALUES ('k'); END $$;", 0},
		{"DO block inside BEGIN", "BEGIN; INSERT INTO a VALUES (1); DO $$ BEGIN INSERT INTO outbox VALUES ('k'); END $$; COMMIT;", 0},
		{"COMMIT inside a DO block", "DO $$ BEGIN INSERT INTO a VALUES (1); COMMIT; INSERT INTO outbox VALUES ('k'); END $$;", 1},
		{"goose down is its own script", "-- +goose Up\nINSERT INTO outbox VALUES ('k');\n-- +goose Down\nDELETE FROM a;", 0},
		{"catalog writes are not business writes", "UPDATE pg_catalog.pg_class SET relname = relname WHERE false; INSERT INTO outbox VALUES ('k');", 0},
		{"COPY FROM is a business write", "COPY a FROM STDIN; INSERT INTO outbox VALUES ('k');", 1},
		{"SQL function body", "CREATE FUNCTION f() RETURNS void LANGUAGE sql AS $$ INSERT INTO a VALUES (1); INSERT INTO outbox VALUES ('k'); $$;", 0},
		{"BEGIN ATOMIC body", "CREATE FUNCTION f() RETURNS void LANGUAGE sql BEGIN ATOMIC INSERT INTO a VALUES (1); INSERT INTO outbox VALUES ('k'); END;", 0},
		{"replay is not paired", "INSERT INTO a VALUES (1); INSERT INTO outbox SELECT idempotency_key, payload FROM poison_outbox;", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := lintString(t, Options{}, tc.src)
			if len(res.Errors) > 0 {
				t.Fatalf("%+v", res.Errors)
			}
			n := 0
			for _, f := range res.Findings {
				if f.Rule == RuleOutboxSameTransaction {
					n++
				}
			}
			if n != tc.want {
				t.Errorf("want %d OBX002 findings, got:\n%s", tc.want, textOf(res))
			}
		})
	}
}

// TestConcurrentLint runs linters in parallel (for the race detector and
// the PL/pgSQL compiler's global state). Two at once are enough for the
// race detector to see shared state; each run of the bad files costs
// seconds under -race, so no more than that.
func TestConcurrentLint(t *testing.T) {
	paths, _ := filepath.Glob(filepath.Join("testdata", "bad", "*.sql"))
	var files []File
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, File{Name: p, Src: b})
	}
	first, err := Lint(Options{}, files)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := Lint(Options{}, files)
			if err != nil {
				t.Error(err)
				return
			}
			if textOf(res) != textOf(first) {
				t.Error("results differ between runs")
			}
		}()
	}
	wg.Wait()
}

func TestPollOrderCases(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want int
	}{
		{"SELECT * FROM outbox LIMIT ALL;", 0},
		{"SELECT * FROM outbox OFFSET 10;", 0},
		{"SELECT * FROM outbox FETCH FIRST 3 ROWS ONLY;", 1},
		{"SELECT * FROM outbox o JOIN topics t ON t.name = o.topic ORDER BY o.created_at LIMIT 5;", 0},
		{"SELECT * FROM topics t JOIN outbox o ON t.name = o.topic LIMIT 5;", 1},
		{"SELECT * FROM (SELECT * FROM outbox ORDER BY created_at LIMIT 5) s;", 0},
		{"SELECT * FROM outbox ORDER BY created_at::date, id LIMIT 5;", 0},
		{"SELECT * FROM outbox ORDER BY coalesce(created_at, now()) LIMIT 5;", 1},
		{"SELECT * FROM outbox WHERE sent_at IS NULL FOR UPDATE;", 0},
		{"SELECT * FROM outbox WHERE sent_at IS NULL FOR NO KEY UPDATE SKIP LOCKED;", 1},
	} {
		if got := rulesOf(lintString(t, Options{}, tc.src)); len(got) != tc.want {
			t.Errorf("%s: got %v, want %d findings", tc.src, got, tc.want)
		}
	}
}

func TestSameTransactionNamesTheNearestWrite(t *testing.T) {
	src := "BEGIN;\nINSERT INTO outbox VALUES ('k');\nCOMMIT;\nINSERT INTO a VALUES (1);\nINSERT INTO b VALUES (1);\n"
	res := lintString(t, Options{}, src)
	if len(res.Findings) != 1 || !strings.Contains(res.Findings[0].Message, "write to a at line 4") {
		t.Fatalf("%s", textOf(res))
	}
	src = "INSERT INTO a VALUES (1);\nINSERT INTO b VALUES (1);\nINSERT INTO outbox VALUES ('k');\n"
	res = lintString(t, Options{}, src)
	if len(res.Findings) != 1 || !strings.Contains(res.Findings[0].Message, "writes b at line 2") {
		t.Fatalf("%s", textOf(res))
	}
}

// TestFuzzSeedsParse: the extra fuzz seeds are valid SQL.
func TestFuzzSeedsParse(t *testing.T) {
	paths, _ := filepath.Glob(filepath.Join("testdata", "seeds", "*.sql"))
	if len(paths) == 0 {
		t.Fatal("no seeds")
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		res := lintString(t, Options{}, string(b))
		if len(res.Errors) > 0 {
			t.Errorf("%s: %+v", p, res.Errors)
		}
	}
}

// TestPLNestingLimit: a PL/pgSQL body nested deeper than maxPLNesting is an
// error of its file and never reaches the PL/pgSQL compiler, whose C stack
// (libpg_query as WebAssembly) would overflow into its static data and
// spoil the files linted after it. A body nested exactly maxPLNesting deep
// compiles and leaves the parser intact.
func TestPLNestingLimit(t *testing.T) {
	nested := func(depth int, open, close string) string {
		// The body's own BEGIN … END is the first level.
		return "DO $$\nBEGIN\n" + strings.Repeat(open, depth-1) + "NULL;\n" + strings.Repeat(close, depth-1) + "END\n$$;\n"
	}
	after, err := os.ReadFile(filepath.Join("testdata", "bad", "OBX005_plpgsql.sql"))
	if err != nil {
		t.Fatal(err)
	}
	alone := textOf(lintString(t, Options{}, string(after)))
	for _, tc := range []struct {
		name        string
		src         string
		wantErrLine int // 0: no error
	}{
		{"blocks at the limit", nested(maxPLNesting, "BEGIN\n", "END;\n"), 0},
		{"IF at the limit", nested(maxPLNesting, "IF true THEN\n", "END IF;\n"), 0},
		{"blocks past the limit", nested(maxPLNesting+1, "BEGIN\n", "END;\n"), maxPLNesting + 2},
		{"LOOP past the limit", nested(maxPLNesting+1, "LOOP\n", "END LOOP;\n"), maxPLNesting + 2},
		{"CASE past the limit", nested(maxPLNesting+1, "CASE 1 WHEN 1 THEN\n", "END CASE;\n"), maxPLNesting + 2},
		{"FOR over CASE past the limit", nested(maxPLNesting+1, "FOR r IN SELECT CASE WHEN true THEN 1 END LOOP\n", "END LOOP;\n"), maxPLNesting + 2},
		{"far past the limit", nested(1000, "BEGIN\n", "END;\n"), maxPLNesting + 2},
		{"IF EXISTS and CASE expressions are no nesting", "DO $$\nDECLARE x int;\nBEGIN\n" +
			strings.Repeat("DROP TABLE IF EXISTS t;\nx := CASE WHEN x > 0 THEN 1 ELSE CASE WHEN x < 0 THEN 2 END END;\n", 2*maxPLNesting) + "END\n$$;\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Lint(Options{}, []File{{Name: "deep.sql", Src: []byte(tc.src)}, {Name: "after.sql", Src: after}})
			if err != nil {
				t.Fatal(err)
			}
			var errs []Error
			for _, e := range res.Errors {
				if e.File == "after.sql" {
					t.Fatalf("after.sql: %+v", e)
				}
				errs = append(errs, e)
			}
			switch {
			case tc.wantErrLine == 0 && len(errs) > 0:
				t.Fatalf("want no error, got %+v", errs)
			case tc.wantErrLine > 0 && (len(errs) != 1 || errs[0].Line != tc.wantErrLine || !strings.Contains(errs[0].Message, "nest more than")):
				t.Fatalf("want one nesting error at line %d, got %+v", tc.wantErrLine, errs)
			}
			// The file after it lints as it does alone.
			res.Errors = nil
			var findings []Finding
			for _, f := range res.Findings {
				if f.File == "after.sql" {
					f.File = "t.sql"
					findings = append(findings, f)
				}
			}
			res.Findings = findings
			if got := textOf(res); got != alone {
				t.Errorf("the next file lints differently:\n%s\nalone:\n%s", got, alone)
			}
		})
	}
}

// TestRunDirectoryWithoutSQL: a directory with no *.sql file under it is an
// error (exit 2) naming the directory, never a clean run.
func TestRunDirectoryWithoutSQL(t *testing.T) {
	empty := t.TempDir()
	if err := os.WriteFile(filepath.Join(empty, "schema.psql"), []byte("SELECT 1;"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, jsonOut := range []bool{false, true} {
		var out bytes.Buffer
		code, err := Run(context.Background(), Options{}, []string{empty}, &out, jsonOut)
		if err != nil {
			t.Fatal(err)
		}
		if code != ExitErrors || !strings.Contains(out.String(), empty) || !strings.Contains(out.String(), "no *.sql file") {
			t.Errorf("json=%v: exit %d, want %d naming %s and \"no *.sql file\":\n%s", jsonOut, code, ExitErrors, empty, out.String())
		}
	}
	// A directory whose SQL was named before is not empty.
	dir := t.TempDir()
	f := filepath.Join(dir, "ok.sql")
	if err := os.WriteFile(f, []byte("SELECT 1;"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code, err := Run(context.Background(), Options{}, []string{f, dir}, &out, false); err != nil || code != ExitClean {
		t.Errorf("file then its directory: exit %d, %v:\n%s", code, err, out.String())
	}
}
