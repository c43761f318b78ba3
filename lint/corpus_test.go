package lint

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// Corpus annotations:
//
//	-- want: OBX003 [OBX003…]   a finding of that rule is reported on this line
//	-- want-error: LINE:COL     the file fails to parse at that position
//	-- lint-options: outbox=T poison=T key=C disable=R,R
var (
	wantRE      = regexp.MustCompile(`--.*?\bwant:\s*((?:OBX\d{3}\s*)+)`)
	wantErrRE   = regexp.MustCompile(`--\s*want-error:\s*(\d+):(\d+)`)
	lintOptsRE  = regexp.MustCompile(`(?m)^--\s*lint-options:\s*(.*)$`)
	corpusRules = regexp.MustCompile(`^(OBX\d{3})_`)
)

// want is an expected finding: file, line, rule.
type want struct {
	file string
	line int
	rule string
}

func (w want) String() string { return fmt.Sprintf("%s:%d %s", w.file, w.line, w.rule) }

func readCorpusFile(t *testing.T, path string) (File, []want, Options) {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var wants []want
	for i, line := range strings.Split(string(src), "\n") {
		if m := wantRE.FindStringSubmatch(line); m != nil {
			for _, r := range strings.Fields(m[1]) {
				wants = append(wants, want{path, i + 1, r})
			}
		}
	}
	var opts Options
	if m := lintOptsRE.FindStringSubmatch(string(src)); m != nil {
		for _, kv := range strings.Fields(m[1]) {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "outbox":
				opts.OutboxTable = v
			case "poison":
				opts.PoisonTable = v
			case "key":
				opts.KeyColumn = v
			case "disable":
				opts.Disable = strings.Split(v, ",")
			default:
				t.Fatalf("%s: unknown lint-options key %q", path, k)
			}
		}
	}
	return File{Name: path, Src: src}, wants, opts
}

func sortedWants(ws []want) []string {
	out := make([]string, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.String())
	}
	slices.Sort(out)
	return out
}

func gotWants(fs []Finding) []string {
	out := make([]string, 0, len(fs))
	for _, f := range fs {
		out = append(out, want{f.File, f.Line, f.Rule}.String())
	}
	slices.Sort(out)
	return out
}

func checkFindingShape(t *testing.T, res Result) {
	t.Helper()
	for _, f := range res.Findings {
		r, ok := LookupRule(f.Rule)
		if !ok || r.Name != f.Name || f.Fix != r.Fix {
			t.Errorf("finding %+v: rule id, name and fix must match the rule table", f)
		}
		if f.Line < 1 || f.Column < 1 || f.Message == "" || f.File == "" {
			t.Errorf("finding %+v: needs file, line ≥ 1, column ≥ 1 and a message", f)
		}
	}
}

func corpusFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", dir, "*.sql"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus files in testdata/%s: %v", dir, err)
	}
	return files
}

// TestCorpusCoversEveryRule: at least two bad and two good files per rule.
func TestCorpusCoversEveryRule(t *testing.T) {
	count := map[string]int{}
	for _, dir := range []string{"bad", "good"} {
		for _, p := range corpusFiles(t, dir) {
			m := corpusRules.FindStringSubmatch(filepath.Base(p))
			if m == nil {
				t.Errorf("%s: corpus files are named OBXnnn_description.sql", p)
				continue
			}
			if _, ok := LookupRule(m[1]); !ok {
				t.Errorf("%s: no rule %s", p, m[1])
			}
			count[dir+" "+m[1]]++
		}
	}
	for _, r := range Rules() {
		for _, dir := range []string{"bad", "good"} {
			if n := count[dir+" "+r.ID]; n < 2 {
				t.Errorf("rule %s has %d %s corpus files, want at least 2", r.ID, n, dir)
			}
		}
	}
}

// TestBadCorpus: each bad file, linted alone, yields exactly its annotated
// findings, and at least one of its own rule.
func TestBadCorpus(t *testing.T) {
	for _, p := range corpusFiles(t, "bad") {
		t.Run(filepath.Base(p), func(t *testing.T) {
			t.Parallel()
			f, wants, opts := readCorpusFile(t, p)
			rule := corpusRules.FindStringSubmatch(filepath.Base(p))[1]
			if !slices.ContainsFunc(wants, func(w want) bool { return w.rule == rule }) {
				t.Fatalf("bad file without a `-- want: %s` annotation", rule)
			}
			res, err := Lint(opts, []File{f})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Errors) > 0 {
				t.Fatalf("parse errors: %+v", res.Errors)
			}
			checkFindingShape(t, res)
			if got, exp := gotWants(res.Findings), sortedWants(wants); !slices.Equal(got, exp) {
				t.Errorf("findings differ\n got: %v\nwant: %v\n%s", got, exp, textOf(res))
			}
			if res.ExitCode() != ExitFindings {
				t.Errorf("exit code %d, want %d", res.ExitCode(), ExitFindings)
			}
			// Disabling the rule, by id or by name, removes its findings.
			for _, d := range []string{rule, ruleByID(rule).Name} {
				o := opts
				o.Disable = append(slices.Clone(o.Disable), strings.ToLower(d))
				res, err := Lint(o, []File{f})
				if err != nil {
					t.Fatal(err)
				}
				for _, fd := range res.Findings {
					if fd.Rule == rule {
						t.Errorf("--disable %s still reports %v", d, fd)
					}
				}
			}
		})
	}
}

// TestGoodCorpus: each good file, linted alone, is clean.
func TestGoodCorpus(t *testing.T) {
	for _, p := range corpusFiles(t, "good") {
		t.Run(filepath.Base(p), func(t *testing.T) {
			t.Parallel()
			f, wants, opts := readCorpusFile(t, p)
			if len(wants) > 0 {
				t.Fatalf("good file with want annotations: %v", wants)
			}
			res, err := Lint(opts, []File{f})
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode() != ExitClean {
				t.Errorf("want clean, got:\n%s", textOf(res))
			}
		})
	}
}

// TestFileSets: each directory under testdata/sets is one file set; rules
// that look across files see all of them.
func TestFileSets(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("testdata", "sets", "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatal("no file sets", err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			t.Parallel()
			paths, _ := filepath.Glob(filepath.Join(dir, "*.sql"))
			var files []File
			var wants []want
			for _, p := range paths {
				f, w, _ := readCorpusFile(t, p)
				files = append(files, f)
				wants = append(wants, w...)
			}
			res, err := Lint(Options{}, files)
			if err != nil {
				t.Fatal(err)
			}
			checkFindingShape(t, res)
			if got, exp := gotWants(res.Findings), sortedWants(wants); !slices.Equal(got, exp) || len(res.Errors) > 0 {
				t.Errorf("findings differ\n got: %v\nwant: %v\n%s", got, exp, textOf(res))
			}
			// Linted file by file, the cross-file evidence is missing.
			if filepath.Base(dir) == "unique_later" {
				res, _ := Lint(Options{}, files[:1])
				if len(res.Findings) == 0 {
					t.Error("the first migration alone should lack the unique key")
				}
			}
		})
	}
}

// TestParseErrors: a file the parser rejects yields one error with the
// parser's message and position (exit 2); it is never skipped.
func TestParseErrors(t *testing.T) {
	for _, p := range corpusFiles(t, "errors") {
		t.Run(filepath.Base(p), func(t *testing.T) {
			t.Parallel()
			src, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			m := wantErrRE.FindSubmatch(src)
			if m == nil {
				t.Fatal("error file without `-- want-error: LINE:COL`")
			}
			line, _ := strconv.Atoi(string(m[1]))
			col, _ := strconv.Atoi(string(m[2]))
			// A clean file next to it must not hide the error.
			res, err := Lint(Options{}, []File{{Name: p, Src: src}, {Name: "ok.sql", Src: []byte("SELECT 1;")}})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Errors) != 1 {
				t.Fatalf("want exactly one error, got %+v", res.Errors)
			}
			e := res.Errors[0]
			if e.File != p || e.Line != line || e.Column != col || e.Message == "" {
				t.Errorf("got %s:%d:%d: %s, want %s:%d:%d", e.File, e.Line, e.Column, e.Message, p, line, col)
			}
			if res.ExitCode() != ExitErrors {
				t.Errorf("exit code %d, want %d", res.ExitCode(), ExitErrors)
			}
		})
	}
}

func TestParseErrorMessagesComeFromPostgres(t *testing.T) {
	res, _ := Lint(Options{}, []File{{Name: "x.sql", Src: []byte("SELECT 1;\nSELECT * FROM outbox WHERE;\n")}})
	if len(res.Errors) != 1 || res.Errors[0].Message != `syntax error at or near ";"` || res.Errors[0].Line != 2 || res.Errors[0].Column != 27 {
		t.Fatalf("got %+v", res.Errors)
	}
}

// TestMigrationsLintClean: walpost's own migrations pass every rule.
func TestMigrationsLintClean(t *testing.T) {
	dir := filepath.Join("..", "migrations")
	sqls, _ := filepath.Glob(filepath.Join(dir, "*.sql"))
	if len(sqls) == 0 {
		t.Fatalf("no migrations found in %s", dir)
	}
	var out bytes.Buffer
	code, err := Run(context.Background(), Options{}, []string{dir}, &out, false)
	if err != nil {
		t.Fatal(err)
	}
	if code != ExitClean || out.Len() != 0 {
		t.Errorf("walpost's migrations must lint clean (exit %d):\n%s", code, out.String())
	}
}

// TestInboxSQLLintsClean: the inbox package's own schema and its Prune
// statement pass OBX010 and every other rule.
func TestInboxSQLLintsClean(t *testing.T) {
	schema, err := os.ReadFile(filepath.Join("..", "inbox", "schema.sql"))
	if err != nil {
		t.Fatal(err)
	}
	prune, err := os.ReadFile(filepath.Join("..", "inbox", "prune.go"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("pruneSQL = `([^`]+)`").FindSubmatch(prune)
	if m == nil {
		t.Fatal("inbox/prune.go: pruneSQL not found")
	}
	stmt := regexp.MustCompile(`\$\d`).ReplaceAllString(string(m[1]), "'1'")
	for name, src := range map[string]string{"inbox/schema.sql": string(schema), "inbox.Prune": stmt + ";"} {
		res := lintString(t, Options{}, src)
		if len(res.Errors) > 0 || len(res.Findings) > 0 {
			t.Errorf("%s does not lint clean:\n%s", name, textOf(res))
		}
	}
}

// TestGolden: the --json and text output of a run over testdata/golden/input.
// Regenerate with: go test ./lint -run TestGolden -update
func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		json bool
	}{{"lint.json", true}, {"lint.txt", false}} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			code, err := Run(context.Background(), Options{}, []string{filepath.Join("testdata", "golden", "input")}, &out, tc.json)
			if err != nil {
				t.Fatal(err)
			}
			if code != ExitErrors {
				t.Errorf("exit code %d, want %d (the input has a broken file)", code, ExitErrors)
			}
			golden := filepath.Join("testdata", "golden", tc.name)
			if *update {
				if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(out.Bytes(), want) {
				t.Errorf("output differs from %s (run with -update after checking):\n%s", golden, out.String())
			}
		})
	}
}

func textOf(r Result) string {
	var b bytes.Buffer
	_ = r.WriteText(&b)
	return b.String()
}
