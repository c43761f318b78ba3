package writer

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrDuplicateKey is matched (errors.Is) by every *DuplicateKeyError.
var ErrDuplicateKey = errors.New("idempotency key already in the outbox")

// DuplicateKeyError is PostgreSQL's unique_violation (SQLSTATE 23505) on
// the outbox's idempotency_key: an event with this key was committed
// before, normally by an earlier attempt of the same work. The transaction
// is aborted; roll it back and treat the work as done.
type DuplicateKeyError struct {
	// Key is the key already present. For a batch it is read from the
	// server's error detail, and empty when the driver does not give the
	// detail (a database/sql driver other than pgx's) or the server left it
	// out (no SELECT privilege on the column).
	Key string
	// Table is the outbox table, as quoted in the statement.
	Table string
	// Constraint is the unique constraint's name when the driver gives it.
	Constraint string
	// Err is the driver's error.
	Err error
}

func (e *DuplicateKeyError) Error() string {
	return fmt.Sprintf("insert into %s: idempotency_key %q is already in the outbox (written by an earlier attempt): %v", e.Table, e.Key, e.Err)
}

// Is reports whether target is ErrDuplicateKey.
func (e *DuplicateKeyError) Is(target error) bool { return target == ErrDuplicateKey }

// Unwrap returns the driver's error.
func (e *DuplicateKeyError) Unwrap() error { return e.Err }

const uniqueViolation = "23505"

// keyDetail is what PostgreSQL's detail of a unique violation on
// idempotency_key contains, in every message language:
// Key (idempotency_key)=(k) already exists.
const keyDetail = "(idempotency_key)=("

// dbError wraps err, from a statement writing keys into t, as the caller
// reads it: a *DuplicateKeyError for a duplicate idempotency key.
func dbError(t *Table, keys func() []string, err error) error {
	var st interface{ SQLState() string } // pgconn.PgError, lib/pq's Error
	if !errors.As(err, &st) || st.SQLState() != uniqueViolation {
		return fmt.Errorf("insert into %s: %w", t.quoted, err)
	}
	d := &DuplicateKeyError{Table: t.quoted, Err: err}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		d.Constraint = pgErr.ConstraintName
		if pgErr.Detail != "" {
			i := strings.Index(pgErr.Detail, keyDetail)
			if i < 0 { // another unique constraint of the table
				return fmt.Errorf("insert into %s: %w", t.quoted, err)
			}
			rest := pgErr.Detail[i+len(keyDetail):]
			if j := strings.LastIndexByte(rest, ')'); j >= 0 {
				d.Key = rest[:j]
			}
		}
	}
	if ks := keys(); len(ks) == 1 {
		d.Key = ks[0]
	} else if d.Key != "" {
		// Only a key of this batch: the detail is the server's text.
		found := false
		for _, k := range ks {
			found = found || k == d.Key
		}
		if !found {
			d.Key = ""
		}
	}
	return d
}
