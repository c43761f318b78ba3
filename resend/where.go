package resend

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// ErrWhere: --where is not a predicate resend runs. The message says what
// was refused, where, and how to write it instead.
var ErrWhere = errors.New("--where refused")

// Functions are the functions --where may call: immutable built-ins of
// pg_catalog that read their arguments and nothing else (no table, no
// setting, no clock), written unqualified or as pg_catalog.name, plus the
// conditional expressions written like calls (coalesce, nullif, greatest,
// least). Every other function call is refused, whatever it does.
var Functions = []string{
	"abs", "btrim", "char_length", "character_length", "coalesce", "greatest", "jsonb_array_length",
	"jsonb_extract_path", "jsonb_extract_path_text", "jsonb_typeof", "least", "left", "length", "lower",
	"ltrim", "nullif", "octet_length", "position", "replace", "right", "rtrim", "split_part",
	"starts_with", "strpos", "substr", "substring", "trim", "upper",
}

// Operators are the operators --where may use: comparison, arithmetic,
// text matching, and jsonb and array access and containment, resolved in
// pg_catalog only (resend runs with search_path = pg_catalog).
var Operators = []string{
	"=", "<>", "!=", "<", "<=", ">", ">=",
	"+", "-", "*", "/", "%", "||",
	"~~", "!~~", "~~*", "!~~*", "~", "!~", "~*", "!~*",
	"->", "->>", "#>", "#>>", "@>", "<@", "?", "?|", "?&", "&&",
}

// Types are the types --where may cast to (x::text, CAST(x AS int8),
// timestamptz '2026-12-01 10:00Z'), single words only.
var Types = []string{
	"bigint", "bool", "boolean", "date", "float4", "float8", "int", "int2", "int4", "int8", "integer",
	"interval", "json", "jsonb", "numeric", "smallint", "text", "timestamp", "timestamptz", "uuid", "varchar",
}

// keywords are the SQL words a predicate may use.
var keywords = []string{
	"all", "and", "any", "array", "as", "between", "both", "case", "cast", "distinct", "else", "end",
	"escape", "false", "for", "from", "ilike", "in", "is", "isnull", "leading", "like", "not",
	"notnull", "null", "or", "similar", "some", "symmetric", "then", "to", "trailing", "true",
	"unknown", "when",
}

// subquery starts a query; clause continues a statement past its WHERE;
// session reads the session's state.
var (
	subquery = []string{"select", "values", "table", "with", "exists", "lateral"}
	clause   = []string{"order", "group", "having", "limit", "offset", "fetch", "union", "intersect", "except", "window", "into", "returning"}
	session  = []string{"current_timestamp", "current_date", "current_time", "localtime", "localtimestamp", "current_user",
		"session_user", "user", "current_role", "current_catalog", "current_schema", "system_user"}
)

// maxDepth bounds nesting: a predicate is a condition, not a program.
const maxDepth = 64

// Where is a checked --where predicate: one expression over the outbox's
// columns.
type Where struct {
	// Text is the predicate as given, without surrounding blanks.
	Text string
	// Columns are the column names it reads, sorted, each once.
	Columns []string
}

// ParseWhere checks text before anything runs: it is tokenized as
// PostgreSQL does (with standard_conforming_strings on, which resend
// sets) and every token must be allowed. Allowed are constants (numbers,
// 'strings', TRUE, FALSE, NULL), column names (checked against the table
// later, CheckColumns: they need a connection), the keywords of
// AND/OR/NOT, IS [NOT] NULL/TRUE/FALSE/DISTINCT FROM, [NOT] IN (list),
// [NOT] BETWEEN, [NOT] LIKE/ILIKE/SIMILAR TO, CASE, ANY/ALL (array) and
// ARRAY[…], the Operators, subscripts, casts to Types, and calls of
// Functions. Refused are semicolons, comments, dollar quotes and
// parameters, prefixed strings (E'…', U&'…'), qualified names (except
// pg_catalog.function), any other word (SELECT and every subquery,
// ORDER BY and every clause, CURRENT_TIMESTAMP and every session value,
// every other function, type or operator), unbalanced parentheses or
// brackets, NUL bytes and invalid UTF-8.
//
// Whether the expression is well formed and boolean is PostgreSQL's to
// say: resend counts the rows in its READ ONLY transaction before it
// produces any. What the check guarantees is that nothing but the row's
// columns, constants and the allowed functions and operators is named,
// and that the text, balanced and without a semicolon, comment or open
// quote, cannot end the parentheses resend embeds it in: "(" + Text + ")".
//
// Why not PostgreSQL's own parser: libpg_query is in this binary only as
// WebAssembly (go-pgquery; CGO_ENABLED=0 rules out pg_query_go's C), and
// compiling it costs about 1.2 s of CPU and 280 MB per process. On a
// 2-core host beside walpost run that alone took the live stream's p99
// commit→visible latency from 25 ms to 230 ms for a second; this check
// costs microseconds, and refuses more, not less.
func ParseWhere(text string) (*Where, error) {
	text = strings.TrimSpace(text)
	if text == "" {
		return nil, fmt.Errorf("%w: the predicate is empty: give a boolean expression over the outbox's columns, e.g. --where \"event_type = 'order.created'\"", ErrWhere)
	}
	if strings.ContainsRune(text, 0) || !utf8.ValidString(text) {
		return nil, fmt.Errorf("%w: it holds a NUL byte or is not valid UTF-8: give the expression as text", ErrWhere)
	}
	toks, err := tokenize(text)
	if err != nil {
		return nil, err
	}
	c := &checker{text: text, toks: toks, cols: map[string]bool{}}
	if err := c.check(); err != nil {
		return nil, err
	}
	w := &Where{Text: text}
	for name := range c.cols {
		w.Columns = append(w.Columns, name)
	}
	slices.Sort(w.Columns)
	return w, nil
}

// SQL is the predicate as resend embeds it.
func (w *Where) SQL() string { return "(" + w.Text + ")" }

// CheckColumns refuses a predicate naming a column the table does not
// have.
func (w *Where) CheckColumns(table string, columns []string) error {
	for _, c := range w.Columns {
		if !slices.Contains(columns, c) {
			have := slices.Clone(columns)
			slices.Sort(have)
			return fmt.Errorf("%w: %q is not a column of %s (nor a keyword, function or type --where allows); its columns are %s", ErrWhere, c, table, strings.Join(have, ", "))
		}
	}
	return nil
}

type tokKind int

const (
	tWord   tokKind = iota // unquoted identifier or keyword, lower-cased
	tQuoted                // "quoted identifier", unescaped
	tString                // 'string'
	tNumber
	tOp    // an operator
	tPunct // ( ) [ ] , : . ::
)

type token struct {
	kind tokKind
	text string
	pos  int // byte offset in the predicate
}

// opChars are the characters PostgreSQL's operators are made of.
const opChars = "+-*/<>=~!@#%^&|`?"

// tokenize splits text as PostgreSQL's lexer does, refusing what --where
// never holds.
func tokenize(text string) ([]token, error) {
	var toks []token
	refuse := func(pos int, what, fix string) error {
		return fmt.Errorf("%w: %s %s is not allowed: %s", ErrWhere, what, at(text, pos), fix)
	}
	for i := 0; i < len(text); {
		ch := text[i]
		switch {
		case ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v':
			i++
		case strings.HasPrefix(text[i:], "--") || strings.HasPrefix(text[i:], "/*"):
			return nil, refuse(i, "a comment", "remove it")
		case ch == ';':
			return nil, fmt.Errorf("%w: a semicolon %s ends a statement, and --where is one expression, not statements: remove it", ErrWhere, at(text, i))
		case ch == '$':
			return nil, refuse(i, "$ (a parameter or a dollar quote)", "write values as 'strings' or numbers")
		case ch == '\\':
			return nil, refuse(i, "a backslash", "write values as 'strings' or numbers")
		case ch == '\'':
			s, n, ok := quoted(text[i:], '\'')
			if !ok {
				return nil, refuse(i, "an unterminated string", "close it with '")
			}
			// PostgreSQL reads these as the clock at evaluation: a
			// --resume would choose other rows than the first run.
			switch strings.ToLower(strings.TrimSpace(s)) {
			case "now", "today", "tomorrow", "yesterday":
				return nil, refuse(i, "'"+s+"' (the clock when the query runs)", "write the time itself, e.g. '2026-12-01T10:00:00Z', or use --since/--until")
			}
			toks = append(toks, token{tString, s, i})
			i += n
		case ch == '"':
			s, n, ok := quoted(text[i:], '"')
			if !ok || s == "" {
				return nil, refuse(i, "an unterminated or empty quoted name", "close it with \"")
			}
			toks = append(toks, token{tQuoted, s, i})
			i += n
		case isDigit(ch) || (ch == '.' && i+1 < len(text) && isDigit(text[i+1])):
			n := number(text[i:])
			if i+n < len(text) && isIdent(text[i+n]) {
				return nil, refuse(i, "a number followed by letters", "separate them, or write the number in decimal")
			}
			toks = append(toks, token{tNumber, text[i : i+n], i})
			i += n
		case isIdentStart(ch):
			n := 1
			for i+n < len(text) && isIdent(text[i+n]) {
				n++
			}
			if i+n < len(text) && (text[i+n] == '\'' || text[i+n] == '&' && strings.HasPrefix(text[i+n:], "&'")) {
				return nil, refuse(i, "a prefixed string (E'…', U&'…', B'…', X'…')", "write a plain 'string'")
			}
			toks = append(toks, token{tWord, strings.ToLower(text[i : i+n]), i})
			i += n
		case ch == ':' && strings.HasPrefix(text[i:], "::"):
			toks = append(toks, token{tPunct, "::", i})
			i += 2
		case strings.IndexByte("()[],:.", ch) >= 0:
			toks = append(toks, token{tPunct, string(ch), i})
			i++
		case strings.IndexByte(opChars, ch) >= 0:
			n := 1
			for i+n < len(text) && strings.IndexByte(opChars, text[i+n]) >= 0 && !strings.HasPrefix(text[i+n:], "--") && !strings.HasPrefix(text[i+n:], "/*") {
				n++
			}
			// As PostgreSQL: a multi-character operator ends in + or - only
			// when it holds one of ~ ! @ # % ^ & | ` ? (so x=-1 is = and -).
			for n > 1 && (text[i+n-1] == '+' || text[i+n-1] == '-') && !strings.ContainsAny(text[i:i+n], "~!@#%^&|`?") {
				n--
			}
			op := text[i : i+n]
			if !slices.Contains(Operators, op) {
				return nil, refuse(i, "operator "+op, "use one of "+strings.Join(Operators, " "))
			}
			toks = append(toks, token{tOp, op, i})
			i += n
		default:
			r, _ := utf8.DecodeRuneInString(text[i:])
			return nil, refuse(i, fmt.Sprintf("character %q", r), "write one expression over the outbox's columns")
		}
	}
	return toks, nil
}

// quoted reads a string quoted by q (doubled inside) at the start of s:
// its value, its length in s, and whether it was closed.
func quoted(s string, q byte) (string, int, bool) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		if s[i] != q {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == q {
			b.WriteByte(q)
			i++
			continue
		}
		return b.String(), i + 1, true
	}
	return "", len(s), false
}

// number is the length of the numeric constant at the start of s.
func number(s string) int {
	i := 0
	for i < len(s) && (isDigit(s[i]) || s[i] == '_') {
		i++
	}
	if i < len(s) && s[i] == '.' && !strings.HasPrefix(s[i:], "..") {
		i++
		for i < len(s) && (isDigit(s[i]) || s[i] == '_') {
			i++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		j := i + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		if j < len(s) && isDigit(s[j]) {
			for j < len(s) && isDigit(s[j]) {
				j++
			}
			i = j
		}
	}
	return i
}

func isDigit(c byte) bool      { return c >= '0' && c <= '9' }
func isIdentStart(c byte) bool { return c == '_' || c >= 0x80 || (c|0x20 >= 'a' && c|0x20 <= 'z') }
func isIdent(c byte) bool      { return isIdentStart(c) || isDigit(c) }

// at names the place of byte offset off of text: its character position
// and the text from there.
func at(text string, off int) string {
	if off < 0 || off > len(text) {
		return fmt.Sprintf("in %q", text)
	}
	rest := text[off:]
	if utf8.RuneCountInString(rest) > 30 {
		rest = string([]rune(rest)[:30]) + "…"
	}
	return fmt.Sprintf("at character %d (%q)", utf8.RuneCountInString(text[:off])+1, rest)
}

// checker checks the tokens of a predicate: every word is a keyword, a
// column, an allowed function (called) or type (cast to), and brackets
// balance.
type checker struct {
	text string
	toks []token
	cols map[string]bool
}

func (c *checker) refuse(t token, what, fix string) error {
	return fmt.Errorf("%w: %s %s is not allowed: %s", ErrWhere, what, at(c.text, t.pos), fix)
}

func (c *checker) is(i int, kind tokKind, text string) bool {
	return i >= 0 && i < len(c.toks) && c.toks[i].kind == kind && c.toks[i].text == text
}

func (c *checker) check() error {
	var stack []token // open ( and [
	for i := 0; i < len(c.toks); i++ {
		t := c.toks[i]
		switch t.kind {
		case tPunct:
			switch t.text {
			case "(", "[":
				if len(stack) >= maxDepth {
					return fmt.Errorf("%w: the expression is nested more than %d levels deep", ErrWhere, maxDepth)
				}
				stack = append(stack, t)
			case ")", "]":
				open := "("
				if t.text == "]" {
					open = "["
				}
				if len(stack) == 0 || stack[len(stack)-1].text != open {
					return c.refuse(t, "an unbalanced "+t.text, "balance the parentheses and brackets")
				}
				stack = stack[:len(stack)-1]
			case ".":
				return c.refuse(t, "a qualified name or field selection", "write the column name alone (e.g. event_type), and use ->, ->> or a subscript for jsonb fields")
			case "::":
				n, err := c.typeName(i + 1)
				if err != nil {
					return err
				}
				i += n
			}
		case tQuoted:
			if c.is(i+1, tPunct, "(") {
				return c.refuse(t, "a call of a quoted name", "call the functions by their plain names")
			}
			c.cols[t.text] = true
		case tWord:
			n, err := c.word(i)
			if err != nil {
				return err
			}
			i += n
		}
	}
	if len(stack) > 0 {
		return c.refuse(stack[len(stack)-1], "an unclosed "+stack[len(stack)-1].text, "balance the parentheses and brackets")
	}
	return nil
}

// word checks the word at i and returns how many tokens after it it
// consumed.
func (c *checker) word(i int) (int, error) {
	t := c.toks[i]
	w := t.text
	call := c.is(i+1, tPunct, "(")
	switch {
	case slices.Contains(subquery, w):
		return 0, c.refuse(t, "a subquery ("+strings.ToUpper(w)+")", "--where reads the outbox row alone; choose rows by their own columns (use --key for a list of keys)")
	case slices.Contains(clause, w):
		return 0, c.refuse(t, "a clause ("+strings.ToUpper(w)+")", "--where is one boolean expression, not a query: give the condition alone")
	case slices.Contains(session, w):
		return 0, c.refuse(t, "a value of the session ("+strings.ToUpper(w)+")", "give times with --since and --until, and constants otherwise")
	case w == "pg_catalog" && c.is(i+1, tPunct, "."):
		if i+2 < len(c.toks) && c.toks[i+2].kind == tWord && c.is(i+3, tPunct, "(") && slices.Contains(Functions, c.toks[i+2].text) {
			return 2, nil
		}
		if c.is(i+3, tPunct, "(") {
			return 0, c.refuse(t, "function pg_catalog."+c.nextText(i+2)+"()", "--where calls only these immutable built-in functions: "+strings.Join(Functions, ", "))
		}
		return 0, c.refuse(t, "pg_catalog."+c.nextText(i+2), "pg_catalog. may only qualify a call of "+strings.Join(Functions, ", "))
	case c.is(i-1, tWord, "as") && slices.Contains(Types, w):
		return 0, nil // CAST( … AS type ), checked by castAs
	case w == "cast" && call:
		return 0, c.castAs(i + 1)
	case w == "array":
		if !c.is(i+1, tPunct, "[") {
			return 0, c.refuse(t, "ARRAY without [", "write ARRAY[a, b]")
		}
		return 0, nil
	case slices.Contains(keywords, w):
		return 0, nil
	case call:
		if !slices.Contains(Functions, w) {
			return 0, c.refuse(t, "function "+w+"()", "--where calls only these immutable built-in functions: "+strings.Join(Functions, ", "))
		}
		return 0, c.afterCall(i + 1)
	case slices.Contains(Types, w) && i+1 < len(c.toks) && c.toks[i+1].kind == tString:
		return 1, nil // a typed constant: timestamptz '2026-12-01 10:00Z'
	}
	if i+1 < len(c.toks) && c.toks[i+1].kind == tWord && !slices.Contains(keywords, c.toks[i+1].text) {
		return 0, c.refuse(c.toks[i+1], "word "+c.toks[i+1].text+" after "+w, "join names with an operator or AND/OR; an alias or a clause has no place in --where")
	}
	c.cols[w] = true
	return 0, nil
}

func (c *checker) nextText(i int) string {
	if i < len(c.toks) {
		return c.toks[i].text
	}
	return ""
}

// afterCall refuses what turns a call into an aggregate or window call:
// DISTINCT or * first, VARIADIC, ORDER BY, FILTER, OVER after it (the
// words themselves are refused elsewhere; * alone here).
func (c *checker) afterCall(open int) error {
	if c.is(open+1, tOp, "*") && c.is(open+2, tPunct, ")") {
		return c.refuse(c.toks[open+1], "(*)", "--where calls functions on the row's own values; aggregates have no place in it")
	}
	if c.is(open+1, tWord, "distinct") || c.is(open+1, tWord, "all") {
		return c.refuse(c.toks[open+1], "an aggregate call", "call the function on the row's own values")
	}
	return nil
}

// castAs checks CAST( … AS type ): the type after the AS of this level.
func (c *checker) castAs(open int) error {
	depth := 0
	for j := open; j < len(c.toks); j++ {
		t := c.toks[j]
		switch {
		case t.kind == tPunct && (t.text == "(" || t.text == "["):
			depth++
		case t.kind == tPunct && (t.text == ")" || t.text == "]"):
			depth--
			if depth == 0 {
				return c.refuse(c.toks[open], "CAST without AS type", "write CAST(x AS int8)")
			}
		case depth == 1 && t.kind == tWord && t.text == "as":
			if _, err := c.typeName(j + 1); err != nil {
				return err
			}
			return nil
		}
	}
	return c.refuse(c.toks[open], "an unclosed CAST", "write CAST(x AS int8)")
}

// typeName checks the type at i (after :: or AS): one of Types, maybe
// pg_catalog-qualified, with constant modifiers and array brackets. It
// returns how many tokens the qualifier took (the rest is checked as
// ordinary tokens).
func (c *checker) typeName(i int) (int, error) {
	n := 0
	if c.is(i, tWord, "pg_catalog") && c.is(i+1, tPunct, ".") {
		i, n = i+2, 2
	}
	if i >= len(c.toks) || c.toks[i].kind != tWord {
		return 0, c.refuse(c.toks[min(i, len(c.toks)-1)], "a cast without a type name", "cast to one of "+strings.Join(Types, ", "))
	}
	if !slices.Contains(Types, c.toks[i].text) {
		return 0, c.refuse(c.toks[i], "a cast to "+c.toks[i].text, "cast to one of "+strings.Join(Types, ", "))
	}
	if c.is(i+1, tPunct, ".") {
		return 0, c.refuse(c.toks[i], "a cast to a qualified type", "cast to one of "+strings.Join(Types, ", "))
	}
	return n + 1, nil
}
