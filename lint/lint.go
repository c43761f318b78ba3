package lint

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Default table names, the same as walpost's postgres.table and
// postgres.poison_table defaults.
const (
	DefaultOutboxTable = "outbox"
	DefaultPoisonTable = "poison_outbox"
	DefaultKeyColumn   = "idempotency_key"
)

// Exit codes of Run and of `walpost lint`.
const (
	ExitClean    = 0 // no finding, every file parsed
	ExitFindings = 1 // at least one finding, every file parsed
	ExitErrors   = 2 // a file could not be read or parsed
)

// Options configures a lint run. The zero value lints the default table
// names with every rule enabled.
type Options struct {
	// OutboxTable is the outbox table, optionally schema-qualified
	// ("app.outbox"). An unqualified name matches the table in any schema; a
	// qualified one matches references with that schema or none.
	// Default "outbox" (config key postgres.table).
	OutboxTable string
	// KeyColumn is the outbox's idempotency key column: the column
	// consumers deduplicate on, which must be NOT NULL and UNIQUE (OBX001)
	// and must not be generated afresh (OBX006, OBX009). Default
	// "idempotency_key"; walpost lint passes mapping.key_column with
	// mapping.profile walpost and mapping.id_column with debezium.
	KeyColumn string
	// PoisonTable is the quarantine table, same matching as OutboxTable.
	// Default "poison_outbox" (config key postgres.poison_table).
	PoisonTable string
	// Disable lists rules to skip, by id (OBX003) or name (outbox-poll-order),
	// case-insensitively. An unknown entry is an error wrapping ErrUnknownRule.
	// Config key lint.disable.
	Disable []string
}

// Finding is one rule violation.
type Finding struct {
	Rule    string `json:"rule"`    // rule id, e.g. OBX003
	Name    string `json:"name"`    // rule name, e.g. outbox-poll-order
	File    string `json:"file"`    // path as given or as found under a directory
	Line    int    `json:"line"`    // 1-based
	Column  int    `json:"column"`  // 1-based, in characters
	Message string `json:"message"` // what is wrong
	Fix     string `json:"fix"`     // how to fix it
}

// Error is a file that could not be read or parsed. Line and Column are 0
// when the problem has no position (an unreadable file).
type Error struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Message string `json:"message"`
}

// Result is the outcome of linting a file set.
type Result struct {
	Findings []Finding `json:"findings"`
	Errors   []Error   `json:"errors"`
}

// ExitCode is ExitErrors when any file failed, else ExitFindings when there
// is a finding, else ExitClean.
func (r Result) ExitCode() int {
	switch {
	case len(r.Errors) > 0:
		return ExitErrors
	case len(r.Findings) > 0:
		return ExitFindings
	default:
		return ExitClean
	}
}

// File is one SQL source to lint.
type File struct {
	Name string // reported as Finding.File
	Src  []byte
}

// config is Options resolved.
type config struct {
	outbox, poison tableName
	key            string // the outbox's idempotency key column
	enabled        map[string]bool
}

func (o Options) resolve() (config, error) {
	c := config{
		outbox:  parseTableName(cmp.Or(strings.TrimSpace(o.OutboxTable), DefaultOutboxTable)),
		poison:  parseTableName(cmp.Or(strings.TrimSpace(o.PoisonTable), DefaultPoisonTable)),
		key:     cmp.Or(strings.TrimSpace(o.KeyColumn), DefaultKeyColumn),
		enabled: make(map[string]bool, len(rules)),
	}
	for _, r := range rules {
		c.enabled[r.ID] = true
	}
	var unknown []string
	for _, d := range o.Disable {
		for _, part := range strings.Split(d, ",") {
			if strings.TrimSpace(part) == "" {
				continue
			}
			r, ok := LookupRule(part)
			if !ok {
				unknown = append(unknown, strings.TrimSpace(part))
				continue
			}
			c.enabled[r.ID] = false
		}
	}
	if len(unknown) > 0 {
		var known []string
		for _, r := range rules {
			known = append(known, r.ID+" ("+r.Name+")")
		}
		return c, fmt.Errorf("%w %s; known rules: %s", ErrUnknownRule, strings.Join(unknown, ", "), strings.Join(known, ", "))
	}
	return c, nil
}

// Lint checks files as one file set. The error is non-nil only for invalid
// options; unreadable SQL is reported in Result.Errors.
func Lint(opts Options, files []File) (res Result, err error) {
	cfg, err := opts.resolve()
	if err != nil {
		return Result{}, err
	}
	defer func() {
		// Invariant 2: a bug in a rule must not take the CI job down with a
		// stack trace; it is reported as an error of the file set.
		if p := recover(); p != nil {
			name := ""
			if len(files) > 0 {
				name = files[0].Name
			}
			res = Result{Findings: []Finding{}, Errors: []Error{{File: name, Message: fmt.Sprintf("internal error in walpost lint (please report): %v", p)}}}
		}
	}()
	return lintFiles(cfg, files), nil
}

// lintFiles is Lint without the panic guard; FuzzLint calls it so that a
// panic is a fuzz failure.
func lintFiles(cfg config, files []File) Result {
	a := &analysis{cfg: cfg}
	res := Result{Findings: []Finding{}, Errors: []Error{}}
	for _, f := range files {
		pf, perr := parseFile(a, f.Name, f.Src)
		if perr != nil { // Invariant 1: reported, never skipped silently
			res.Errors = append(res.Errors, *perr)
			continue
		}
		a.files = append(a.files, pf)
	}
	findings, supErrs := suppress(files, a.run())
	res.Findings = findings
	res.Errors = append(res.Errors, supErrs...)
	sortResult(&res)
	return res
}

// sortResult orders findings and errors by file, line, column and rule
// (Invariant 3) and drops exact duplicates.
func sortResult(r *Result) {
	slices.SortStableFunc(r.Findings, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column),
			cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Message, b.Message))
	})
	r.Findings = slices.Compact(r.Findings)
	slices.SortStableFunc(r.Errors, func(a, b Error) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column),
			cmp.Compare(a.Message, b.Message))
	})
}

// Run lints paths — files, or directories searched recursively for *.sql —
// as one file set, writes the result to w (text, or JSON when jsonOut) and
// returns the exit code. The error is non-nil for invalid options (exit code
// ExitErrors) or when w fails.
func Run(ctx context.Context, opts Options, paths []string, w io.Writer, jsonOut bool) (int, error) {
	format := FormatText
	if jsonOut {
		format = FormatJSON
	}
	return RunFormat(ctx, opts, paths, w, format, "")
}

// RunFormat is Run with an output format: FormatText, FormatJSON or
// FormatSARIF (version is the tool version the SARIF log names).
func RunFormat(ctx context.Context, opts Options, paths []string, w io.Writer, format, version string) (int, error) {
	if !slices.Contains(Formats, format) {
		return ExitErrors, fmt.Errorf("unknown output format %q: text, json or sarif", format)
	}
	if _, err := opts.resolve(); err != nil {
		return ExitErrors, err
	}
	files, readErrs, err := collect(ctx, paths)
	if err != nil {
		return ExitErrors, err
	}
	res, err := Lint(opts, files)
	if err != nil {
		return ExitErrors, err
	}
	res.Errors = append(res.Errors, readErrs...)
	sortResult(&res)
	switch format {
	case FormatJSON:
		err = res.WriteJSON(w)
	case FormatSARIF:
		err = res.WriteSARIF(w, version)
	default:
		err = res.WriteText(w)
	}
	if err != nil {
		return ExitErrors, fmt.Errorf("write lint output: %w", err)
	}
	return res.ExitCode(), nil
}

// collect reads every file named by paths, walking directories for *.sql in
// lexical order. A path that cannot be read becomes an Error, not a failure
// of the run.
func collect(ctx context.Context, paths []string) ([]File, []Error, error) {
	var files []File
	var errs []Error
	seen := map[string]bool{}
	read := func(p string) {
		if seen[filepath.Clean(p)] {
			return
		}
		seen[filepath.Clean(p)] = true
		b, err := os.ReadFile(p)
		if err != nil {
			errs = append(errs, Error{File: p, Message: "cannot read file: " + describeIOError(err)})
			return
		}
		files = append(files, File{Name: p, Src: b})
	}
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		st, err := os.Stat(p)
		if err != nil {
			errs = append(errs, Error{File: p, Message: "cannot read file: " + describeIOError(err)})
			continue
		}
		if !st.IsDir() {
			read(p)
			continue
		}
		before := len(files)
		werr := filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				errs = append(errs, Error{File: path, Message: "cannot read directory: " + describeIOError(err)})
				if d != nil && d.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if !d.IsDir() && strings.EqualFold(filepath.Ext(path), ".sql") {
				read(path)
			}
			return nil
		})
		if werr != nil {
			return nil, nil, werr
		}
		// A directory without SQL is a wrong path or a wrong extension:
		// linting nothing must not pass the gate.
		if len(files) == before && !seenSQL(seen, p) {
			errs = append(errs, Error{File: p, Message: "no *.sql file in this directory or below: give the directory holding the SQL, or name files with another extension explicitly"})
		}
	}
	return files, errs, nil
}

// seenSQL reports whether a file under dir was read already (named
// before, or under an earlier directory argument).
func seenSQL(seen map[string]bool, dir string) bool {
	dir = filepath.Clean(dir) + string(filepath.Separator)
	for p := range seen {
		if strings.HasPrefix(p, dir) && strings.EqualFold(filepath.Ext(p), ".sql") {
			return true
		}
	}
	return false
}

func describeIOError(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// WriteText writes one line per error and finding, in file, line and
// column order:
//
//	file:line:col: OBX003 outbox-poll-order: message (fix: …)
//	file:line:col: error: message
func (r Result) WriteText(w io.Writer) error {
	type entry struct {
		file      string
		line, col int
		text      string
	}
	entries := make([]entry, 0, len(r.Errors)+len(r.Findings))
	for _, e := range r.Errors {
		if e.Line > 0 {
			entries = append(entries, entry{e.File, e.Line, e.Column, fmt.Sprintf("%s:%d:%d: error: %s\n", e.File, e.Line, e.Column, e.Message)})
		} else {
			entries = append(entries, entry{e.File, 0, 0, fmt.Sprintf("%s: error: %s\n", e.File, e.Message)})
		}
	}
	for _, f := range r.Findings {
		entries = append(entries, entry{f.File, f.Line, f.Column,
			fmt.Sprintf("%s:%d:%d: %s %s: %s (fix: %s)\n", f.File, f.Line, f.Column, f.Rule, f.Name, f.Message, f.Fix)})
	}
	slices.SortStableFunc(entries, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.file, b.file), cmp.Compare(a.line, b.line), cmp.Compare(a.col, b.col))
	})
	var b strings.Builder
	for _, e := range entries {
		b.WriteString(e.text)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes {"findings":[…],"errors":[…]}, both arrays present even
// when empty.
func (r Result) WriteJSON(w io.Writer) error {
	if r.Findings == nil {
		r.Findings = []Finding{}
	}
	if r.Errors == nil {
		r.Errors = []Error{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}
