package lint

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLint feeds arbitrary bytes to the linter: it must never panic (nor
// crash inside libpg_query), and every position it reports must lie in the
// file. Seeded with every SQL file under testdata.
//
//	go test -run='^$' -fuzz=FuzzLint -fuzztime=60s ./lint
//
// Crashers land in testdata/fuzz/FuzzLint and are committed.
func FuzzLint(f *testing.F) {
	err := filepath.WalkDir("testdata", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".sql") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			f.Add(b)
		}
		return nil
	})
	if err != nil {
		f.Fatal(err)
	}
	cfg, err := Options{}.resolve()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		res := lintFiles(cfg, []File{{Name: "fuzz.sql", Src: src}})
		lines := bytes.Count(src, []byte("\n")) + 1
		for _, fd := range res.Findings {
			if fd.Line < 1 || fd.Line > lines || fd.Column < 1 || fd.Message == "" {
				t.Fatalf("finding out of the file (%d lines): %+v", lines, fd)
			}
		}
		for _, e := range res.Errors {
			if e.Line < 1 || e.Line > lines || e.Column < 1 || e.Message == "" {
				t.Fatalf("error out of the file (%d lines): %+v", lines, e)
			}
		}
		// A malformed suppression comment is an error of its own, next to
		// the findings (TestSuppression), one per bad rule and per missing
		// reason; the rest is at most one parse error, and a file that does
		// not parse has no findings.
		_, supErrs := suppressions("fuzz.sql", src)
		parseErrs := len(res.Errors) - len(supErrs)
		if parseErrs < 0 || parseErrs > 1 {
			t.Fatalf("one file, %d suppression errors, several parse errors: %+v", len(supErrs), res.Errors)
		}
		if parseErrs > 0 && len(res.Findings) > 0 {
			t.Fatalf("a file that does not parse has no findings: %+v", res)
		}
		var out bytes.Buffer
		if err := res.WriteJSON(&out); err != nil || !json.Valid(out.Bytes()) {
			t.Fatalf("JSON output: %v %q", err, out.String())
		}
	})
}
