package writer

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// sqlStateErr is a driver error that gives only its SQLSTATE, as lib/pq's.
type sqlStateErr string

func (e sqlStateErr) Error() string    { return "pq: " + string(e) }
func (e sqlStateErr) SQLState() string { return string(e) }

func TestDBError(t *testing.T) {
	tb, _ := NewTable("outbox")
	one := func() []string { return []string{"k1"} }
	batch := func() []string { return []string{"a", "b)c", "d"} }
	dup := func(detail string) error {
		return fmt.Errorf("copy: %w", &pgconn.PgError{Code: "23505", ConstraintName: "outbox_idempotency_key_key", Detail: detail})
	}
	for _, tc := range []struct {
		name    string
		err     error
		keys    func() []string
		isDup   bool
		key     string
		constr  string
		message string
	}{
		{"single insert", dup("Key (idempotency_key)=(k1) already exists."), one, true, "k1", "outbox_idempotency_key_key", ""},
		{"batch, key from detail", dup("Key (idempotency_key)=(b)c) already exists."), batch, true, "b)c", "outbox_idempotency_key_key", ""},
		{"batch, translated detail", dup("Schlüssel »(idempotency_key)=(d)« existiert bereits."), batch, true, "d", "outbox_idempotency_key_key", ""},
		{"batch, detail not a key of the batch", dup("Key (idempotency_key)=(zz) already exists."), batch, true, "", "outbox_idempotency_key_key", ""},
		{"batch, no detail", dup(""), batch, true, "", "outbox_idempotency_key_key", ""},
		{"other unique constraint", dup("Key (id)=(00000000-0000-0000-0000-000000000001) already exists."), one, false, "", "", `insert into "outbox": copy:`},
		{"driver with SQLSTATE only", sqlStateErr("23505"), one, true, "k1", "", ""},
		{"other error", &pgconn.PgError{Severity: "ERROR", Code: "22P02", Message: "invalid input syntax for type json"}, one, false, "", "", `insert into "outbox": ERROR: invalid input syntax`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := dbError(tb, tc.keys, tc.err)
			if !errors.Is(err, tc.err) {
				t.Fatalf("%v does not wrap the driver's error", err)
			}
			var d *DuplicateKeyError
			if got := errors.As(err, &d); got != tc.isDup || errors.Is(err, ErrDuplicateKey) != tc.isDup {
				t.Fatalf("err %v: duplicate = %v, want %v", err, got, tc.isDup)
			}
			if !tc.isDup {
				if got := err.Error(); len(got) < len(tc.message) || got[:len(tc.message)] != tc.message {
					t.Fatalf("message %q, want prefix %q", got, tc.message)
				}
				return
			}
			if d.Key != tc.key || d.Constraint != tc.constr || d.Table != `"outbox"` {
				t.Fatalf("DuplicateKeyError %+v, want key %q constraint %q", d, tc.key, tc.constr)
			}
		})
	}
}
