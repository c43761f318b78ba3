package main

import (
	"fmt"
	"io"
	"strings"
)

// postgresConnectError says that PostgreSQL could not be reached, and how
// to fix it, around pgx's dial or authentication error (folded into one
// line); it unwraps to err.
func postgresConnectError(err error) error {
	return &wrapped{msg: fmt.Sprintf("cannot connect to PostgreSQL (%s); fix: check host, port, user, password and database in postgres.url (WALPOST_POSTGRES_URL)",
		oneLine(err.Error())), err: err}
}

// wrapped is an error with a message of its own that unwraps to err.
type wrapped struct {
	msg string
	err error
}

func (e *wrapped) Error() string { return e.msg }
func (e *wrapped) Unwrap() error { return e.err }

// oneLine folds pgx's multi-line connect error ("failed to connect to …:"
// then one "\n\t"-indented line per host and per sslmode attempt, often
// the same line twice) into one line, each distinct attempt once, so a
// check's result stays one line. Other newlines (several errors joined)
// are kept.
func oneLine(s string) string {
	parts := strings.Split(s, "\n\t")
	if len(parts) == 1 {
		return s
	}
	var b strings.Builder
	b.WriteString(parts[0])
	var kept []string
next:
	for i, p := range parts[1:] {
		for _, k := range kept {
			if strings.HasPrefix(p, k) {
				// The same attempt again; keep only what follows it (the
				// last part carries the text after pgx's message).
				b.WriteString(p[len(k):])
				continue next
			}
		}
		if i > 0 {
			b.WriteString("; ")
		} else if !strings.HasSuffix(parts[0], " ") {
			b.WriteString(" ")
		}
		b.WriteString(p)
		kept = append(kept, p)
	}
	return b.String()
}

// oneLineWriter writes each Write as one line (oneLine): preflight writes
// a check's whole line in one call.
type oneLineWriter struct{ w io.Writer }

func (o oneLineWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(o.w, oneLine(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
