package migrations

import (
	"io/fs"
	"sort"
	"strings"
)

// Script is one migration's Up SQL, rendered for a Names.
type Script struct {
	Name string // file name, e.g. 00001_outbox.sql
	SQL  string // the statements between "-- +goose Up" and "-- +goose Down"
}

// UpSQL returns the Up SQL of every migration rendered for names, in
// version order: what Up runs on an empty database (walpost migrate
// --print-sql, for change review). Goose's annotations are kept, so the
// text is the files' own.
func UpSQL(names Names) ([]Script, error) {
	fsys, err := render(names.withDefaults())
	if err != nil {
		return nil, err
	}
	files, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	out := make([]Script, 0, len(files))
	for _, name := range files {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		up, _, _ := strings.Cut(string(b), "-- +goose Down")
		out = append(out, Script{Name: name, SQL: strings.TrimRight(up, "\n") + "\n"})
	}
	return out, nil
}
