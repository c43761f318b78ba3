package kafka

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// The trace context of mapping.tracing_column (docs/tracing.md): the
// application's W3C trace context, written into the outbox row, carried to
// the record as the headers traceparent and tracestate, as OpenTelemetry's
// W3C propagator (which Debezium's tracing uses) writes them.

// Header names of the W3C trace context (https://www.w3.org/TR/trace-context/).
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// ErrInvalidTraceContext is matched by the errors of ParseTraceContext:
// the tracing column's text is not a trace context the record can carry.
// The record is produced without it (or without its tracestate only).
var ErrInvalidTraceContext = errors.New("invalid trace context")

// TraceContext is a W3C trace context as a record carries it.
type TraceContext struct {
	// Traceparent is "00-<trace-id>-<parent-id>-<flags>", lower-case hex,
	// as OpenTelemetry's W3C propagator writes it; "" for none.
	Traceparent string
	// Tracestate is the list of members joined by "," without spaces; ""
	// for none.
	Tracestate string
}

// traceparentLen is the length of a version 00 traceparent.
const traceparentLen = 55

// ParseTraceContext reads the text of a tracing column in either form:
//
//   - java.util.Properties text, as Debezium's tracing reads the column
//     (tracing.span.context.field): lines key=value (or key:value, or
//     key value), comments (# or !), backslash escapes and continued lines;
//     the keys traceparent and tracestate are read, the others ignored;
//   - a plain traceparent value ("00-…-…-01"): text without "=", ":" or a
//     line break.
//
// The traceparent is checked as OpenTelemetry's W3C propagator extracts it
// (a version other than ff, lower-case hex ids not all zero, a version 00
// exactly 55 characters, a later version at least that with "-" after)
// and returned as that propagator injects it (version 00, the first four
// fields). A tracestate is split at "," with spaces and tabs around it,
// checked against the W3C grammar (at most 32 members, key=value) and
// joined again with ",". Text without a traceparent, or with a malformed
// one, is an error (ErrInvalidTraceContext) with an empty TraceContext; a
// malformed tracestate is an error too, but the TraceContext keeps its
// Traceparent. Empty or blank text is no trace context and no error.
func ParseTraceContext(text []byte) (TraceContext, error) {
	s := strings.Trim(string(text), " \t\f\r\n")
	if s == "" {
		return TraceContext{}, nil
	}
	parent, state := s, ""
	if strings.ContainsAny(s, "=:\r\n") {
		parent, state = properties(s)
		if parent == "" {
			return TraceContext{}, traceErr("no traceparent key in the properties text")
		}
	}
	var tc TraceContext
	var err error
	if tc.Traceparent, err = normTraceparent(parent); err != nil {
		return TraceContext{}, err
	}
	if state != "" {
		if tc.Tracestate, err = normTracestate(state); err != nil {
			return tc, err
		}
	}
	return tc, nil
}

// CheckTraceContext checks a traceparent and tracestate given apart (a
// row's headers column) as ParseTraceContext checks those of the tracing
// column, with the same results.
func CheckTraceContext(traceparent, tracestate string) (TraceContext, error) {
	var tc TraceContext
	var err error
	if tc.Traceparent, err = normTraceparent(traceparent); err != nil {
		return TraceContext{}, err
	}
	if tracestate != "" {
		if tc.Tracestate, err = normTracestate(tracestate); err != nil {
			return tc, err
		}
	}
	return tc, nil
}

func traceErr(reason string) error {
	return &traceError{reason}
}

type traceError struct{ reason string }

func (e *traceError) Error() string        { return "invalid trace context: " + e.reason }
func (e *traceError) Is(target error) bool { return target == ErrInvalidTraceContext }

// normTraceparent checks p as OpenTelemetry's W3CTraceContextPropagator
// extracts a traceparent and returns it as that propagator injects it.
func normTraceparent(p string) (string, error) {
	if len(p) < traceparentLen || (len(p) > traceparentLen && p[traceparentLen] != '-') ||
		p[2] != '-' || p[35] != '-' || p[52] != '-' {
		return "", traceErr("traceparent is not version-traceid-parentid-flags (00-<32 hex>-<16 hex>-<2 hex>)")
	}
	version, trace, span, flags := p[0:2], p[3:35], p[36:52], p[53:55]
	switch {
	case !lowerHex(version) || version == "ff":
		return "", traceErr("traceparent version is not 00-fe in lower-case hex")
	case version == "00" && len(p) > traceparentLen:
		return "", traceErr("traceparent version 00 has more than four fields")
	case !lowerHex(trace) || allZero(trace):
		return "", traceErr("traceparent trace-id is not 32 lower-case hex digits, not all zero")
	case !lowerHex(span) || allZero(span):
		return "", traceErr("traceparent parent-id is not 16 lower-case hex digits, not all zero")
	case !lowerHex(flags):
		return "", traceErr("traceparent flags are not 2 lower-case hex digits")
	}
	if version == "00" {
		return p, nil
	}
	return "00" + p[2:traceparentLen], nil
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func allZero(s string) bool { return strings.Trim(s, "0") == "" }

// maxTracestateMembers is the W3C limit of tracestate list-members.
const maxTracestateMembers = 32

// normTracestate checks a tracestate against the W3C grammar and joins
// its members with ",".
func normTracestate(s string) (string, error) {
	members := strings.Split(s, ",")
	if len(members) > maxTracestateMembers {
		return "", traceErr("tracestate has more than 32 members")
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, m := range members {
		m = strings.Trim(m, " \t")
		if m == "" {
			continue
		}
		k, v, ok := strings.Cut(m, "=")
		if !ok || !tracestateKey(k) || !tracestateValue(v) {
			return "", traceErr("tracestate member is not key=value of the W3C grammar")
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(m)
	}
	return b.String(), nil
}

// tracestateKey: lcalpha 0*255(lcalpha/DIGIT/"_"/"-"/"*"/"/"), or
// tenant@system with a tenant of up to 241 and a system of up to 14 of
// those characters (the tenant may start with a digit).
func tracestateKey(k string) bool {
	ok := func(s string, max int, digitFirst bool) bool {
		if s == "" || len(s) > max {
			return false
		}
		if c := s[0]; !(c >= 'a' && c <= 'z' || digitFirst && c >= '0' && c <= '9') {
			return false
		}
		for i := 1; i < len(s); i++ {
			c := s[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '*' || c == '/') {
				return false
			}
		}
		return true
	}
	if tenant, system, multi := strings.Cut(k, "@"); multi {
		return ok(tenant, 241, true) && ok(system, 14, false)
	}
	return ok(k, 256, false)
}

// tracestateValue: 0*255(chr) nblk-chr, chr %x20-7E except "," and "=".
func tracestateValue(v string) bool {
	if v == "" || len(v) > 256 || v[len(v)-1] == ' ' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e || c == ',' || c == '=' {
			return false
		}
	}
	return true
}

// properties reads the traceparent and tracestate keys of s as
// java.util.Properties.load reads text: logical lines (a line ending in an
// odd number of backslashes continues on the next, whose leading white
// space is dropped), comment lines (# or ! first), a key ending at the
// first unescaped "=", ":" or white space, the value after white space and
// one "=" or ":", escapes \t \n \r \f \uXXXX (another escaped character is
// itself). A later key replaces an earlier one.
func properties(s string) (traceparent, tracestate string) {
	for len(s) > 0 {
		var line string
		line, s = logicalLine(s)
		k, v := keyValue(line)
		switch k {
		case HeaderTraceparent:
			traceparent = v
		case HeaderTracestate:
			tracestate = v
		}
	}
	return traceparent, tracestate
}

func isPropSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\f' }

// logicalLine returns the next logical line of s (continuations joined,
// escapes still in) and the rest; blank and comment lines come back empty.
func logicalLine(s string) (line, rest string) {
	var b strings.Builder
	first := true
	for {
		i := 0
		for i < len(s) && isPropSpace(s[i]) {
			i++
		}
		s = s[i:]
		if first && len(s) > 0 && (s[0] == '#' || s[0] == '!') {
			_, after, _ := cutLine(s)
			return "", after
		}
		first = false
		l, after, _ := cutLine(s)
		n := 0
		for j := len(l) - 1; j >= 0 && l[j] == '\\'; j-- {
			n++
		}
		if n%2 == 1 && after != "" {
			b.WriteString(l[:len(l)-1])
			s = after
			continue
		}
		if n%2 == 1 {
			l = l[:len(l)-1] // a continuation at the end of the text
		}
		b.WriteString(l)
		return b.String(), after
	}
}

// cutLine splits s at its first line terminator (\n, \r or \r\n).
func cutLine(s string) (line, rest string, found bool) {
	i := strings.IndexAny(s, "\r\n")
	if i < 0 {
		return s, "", false
	}
	if s[i] == '\r' && i+1 < len(s) && s[i+1] == '\n' {
		return s[:i], s[i+2:], true
	}
	return s[:i], s[i+1:], true
}

// keyValue splits a logical line into its unescaped key and value.
func keyValue(line string) (key, value string) {
	i := 0
	for i < len(line) {
		c := line[i]
		if c == '\\' {
			i += 2
			continue
		}
		if c == '=' || c == ':' || isPropSpace(c) {
			break
		}
		i++
	}
	i = min(i, len(line))
	key, v := line[:i], line[i:]
	j := 0
	for j < len(v) && isPropSpace(v[j]) {
		j++
	}
	if j < len(v) && (v[j] == '=' || v[j] == ':') {
		j++
		for j < len(v) && isPropSpace(v[j]) {
			j++
		}
	}
	return unescape(key), unescape(v[j:])
}

// unescape resolves java.util.Properties escapes.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch c = s[i]; c {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'f':
			b.WriteByte('\f')
		case 'u':
			var r rune
			n := 0
			for ; n < 4 && i+1+n < len(s); n++ {
				h := s[i+1+n]
				switch {
				case h >= '0' && h <= '9':
					r = r<<4 | rune(h-'0')
				case h >= 'a' && h <= 'f':
					r = r<<4 | rune(h-'a'+10)
				case h >= 'A' && h <= 'F':
					r = r<<4 | rune(h-'A'+10)
				default:
					n = 5 // Java throws "Malformed \uxxxx encoding"
				}
			}
			if n != 4 {
				return "" // the key or value is unusable, as Java's load fails
			}
			b.WriteRune(r)
			i += 4
		default:
			b.WriteByte(c)
		}
	}
	if !utf8.ValidString(b.String()) {
		return ""
	}
	return b.String()
}
