// Package redact hides passwords in PostgreSQL connection strings wherever
// they appear in a message: URLs (postgres://user:secret@host) and
// keyword/value DSNs (password=secret), also inside longer text and when
// the URL does not parse.
package redact

import (
	"net/url"
	"regexp"
)

var (
	dsnPasswordRE = regexp.MustCompile(`(?i)(password\s*=\s*)('[^']*'|\S+)`)
	urlPasswordRE = regexp.MustCompile(`(postgres(?:ql)?://[^:/@\s"']*:)[^@\s"']*@`)
	urlUserinfoRE = regexp.MustCompile(`postgres(ql)?://[^\s"']+`)
)

// String returns s with every PostgreSQL password replaced by xxxxx.
func String(s string) string {
	s = dsnPasswordRE.ReplaceAllString(s, "${1}xxxxx")
	return urlUserinfoRE.ReplaceAllStringFunc(s, func(m string) string {
		u, err := url.Parse(m)
		if err != nil {
			return urlPasswordRE.ReplaceAllString(m, "${1}xxxxx@")
		}
		return u.Redacted()
	})
}

// Error wraps err so that its message is redacted while errors.Is and
// errors.As still see the chain; nil stays nil.
func Error(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*redacted); ok {
		return err
	}
	return &redacted{err: err}
}

type redacted struct{ err error }

func (r *redacted) Error() string { return String(r.err.Error()) }
func (r *redacted) Unwrap() error { return r.err }
