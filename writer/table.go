package writer

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Table is an outbox table to write to. Its methods are safe for
// concurrent use.
type Table struct {
	ident  pgx.Identifier
	quoted string
	insert string // the single-row INSERT
}

// DefaultTable is the table "outbox" (walpost's default postgres.table),
// which the package-level functions write to.
var DefaultTable = mustTable("outbox")

// ident is walpost's postgres.table form: an unquoted identifier,
// optionally schema-qualified.
var ident = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_$]{0,62}\.)?[A-Za-z_][A-Za-z0-9_$]{0,62}$`)

// NewTable returns the outbox table name, given as walpost's postgres.table
// is: an unquoted identifier of letters, digits, _ and $ (at most 63),
// optionally schema-qualified ("app.outbox"). PostgreSQL folds unquoted
// names to lower case, so does NewTable; the name is quoted in every
// statement. Anything else (quotes, spaces, three parts) is refused.
func NewTable(name string) (*Table, error) {
	if !ident.MatchString(name) {
		return nil, fmt.Errorf("outbox table name %q: want an unquoted identifier, optionally schema-qualified (app.outbox), as walpost's postgres.table", name)
	}
	id := pgx.Identifier(strings.Split(strings.ToLower(name), "."))
	t := &Table{ident: id, quoted: id.Sanitize()}
	t.insert = "INSERT INTO " + t.quoted + " (" + strings.Join(columns, ", ") + ") VALUES ($1, $2, $3, $4, $5, $6)"
	return t, nil
}

func mustTable(name string) *Table {
	t, err := NewTable(name)
	if err != nil {
		panic(err)
	}
	return t
}

// String returns the table's name as quoted in statements.
func (t *Table) String() string { return t.quoted }
