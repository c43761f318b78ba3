package poison

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestPermanent: which errors of the poison insert are retried (the
// connection, a server shutting down, a serialization failure, a missing
// privilege) and which stop walpost (SQLSTATE classes 22, 23, 42).
func TestPermanent(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "22P02"}, true}, // invalid input syntax (uuid, json)
		{&pgconn.PgError{Code: "22007"}, true}, // invalid datetime format
		{&pgconn.PgError{Code: "23502"}, true}, // not null violation
		{&pgconn.PgError{Code: "23505"}, true}, // unique violation
		{&pgconn.PgError{Code: "42703"}, true}, // undefined column
		{&pgconn.PgError{Code: "42P10"}, true}, // no unique key for ON CONFLICT
		{&pgconn.PgError{Code: "42804"}, true}, // datatype mismatch
		{fmt.Errorf("insert: %w", &pgconn.PgError{Code: "22P02"}), true},
		{&pgconn.PgError{Code: "42501"}, false}, // privilege: granted while walpost retries
		{&pgconn.PgError{Code: "57P01"}, false}, // admin shutdown
		{&pgconn.PgError{Code: "40001"}, false}, // serialization failure
		{&pgconn.PgError{Code: "08006"}, false}, // connection failure
		{&pgconn.PgError{Code: "53300"}, false}, // too many connections
		{errors.New("connection reset by peer"), false},
		{&pgconn.PgError{Code: ""}, false},
	}
	for _, tt := range tests {
		if got := permanent(tt.err); got != tt.want {
			t.Errorf("permanent(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// TestTableError: every TableError is an ErrUnwritable, keeps the
// PostgreSQL error for errors.As, and names the table, column, event and
// fix.
func TestTableError(t *testing.T) {
	pgErr := &pgconn.PgError{Code: "22P02", Message: `invalid input syntax for type uuid: "order-7"`}
	err := fmt.Errorf("quarantine: %w", &TableError{Table: `"poison_outbox"`, Column: "outbox_id", Key: "k-1",
		Problem: "the event's outbox_id does not cast to the column's type uuid", Fix: "ALTER TABLE ...", Err: pgErr})
	if !errors.Is(err, ErrUnwritable) {
		t.Errorf("%v is not ErrUnwritable", err)
	}
	var got *pgconn.PgError
	if !errors.As(err, &got) || got.Code != "22P02" {
		t.Errorf("errors.As(%v) = %v, want the PostgreSQL error", err, got)
	}
	for _, want := range []string{`poison table "poison_outbox"`, "column outbox_id", `event "k-1"`, "does not cast", "order-7", "fix: ALTER TABLE"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
}
