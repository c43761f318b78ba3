package lint

import (
	"regexp"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	pgquery "github.com/wasilibs/go-pgquery"
)

// maxBodyDepth bounds function bodies nested in function bodies (a DO block
// run by a DO block …).
const maxBodyDepth = 4

// body is a function body or DO block being expanded into statements.
type body struct {
	a       *analysis
	f       *file
	id      int
	unit    int
	txn     int
	inBlock bool
	start   int  // file offset of the body's first character
	end     int  // file offset bound for searching the body
	exact   bool // start is known: positions inside the body can be computed
	depth   int
	lines   []int // file offsets of the body's line starts
	events  []plEvent
	owner   *stmt
	tokens  []*pg.ScanToken // of the body text, offsets relative to start
	text    string          // the body text when exact and dollar-quoted
	used    map[int]bool    // positions already given to an event
}

// expandBodies adds the statements inside a CREATE FUNCTION / DO statement;
// stmtText is the statement's own text.
func (a *analysis) expandBodies(f *file, s *stmt, stmtText string, depth int) *Error {
	if depth >= maxBodyDepth {
		return nil
	}
	switch x := s.node.(type) {
	case *pg.DoStmt:
		lang, as := bodyOptions(x.Args, "plpgsql")
		if as == nil || lang != "plpgsql" || as.Arg.GetString_() == nil {
			return nil
		}
		b := a.newBody(f, s, as, depth)
		b.unit, b.txn, b.inBlock = s.unit, s.txn, s.inBlock // runs inline, in the caller's transaction
		return b.plpgsql(stmtText, strVal(as.Arg))
	case *pg.CreateFunctionStmt:
		lang, as := bodyOptions(x.Options, "")
		if x.SqlBody != nil { // BEGIN ATOMIC … END: already parsed, absolute locations
			b := a.newBody(f, s, nil, depth)
			var list []*pg.Node
			flattenLists(x.SqlBody, &list)
			for _, n := range list {
				m := unwrap(n)
				if m == nil {
					continue
				}
				es := &stmt{f: f, node: m, unit: b.unit, txn: b.txn, body: b.id, inBlock: true,
					base: s.base, prefix: s.prefix, verbatim: s.verbatim}
				es.pos = s.at(firstLocation(m))
				es.end = s.end
				es.nodes = collectNodes(m)
				f.stmts = append(f.stmts, es)
			}
		}
		if as == nil {
			return nil
		}
		items := as.Arg.GetList().GetItems()
		if len(items) != 1 || items[0].GetString_() == nil {
			return nil // C functions: AS 'obj_file', 'link_symbol'
		}
		switch lang {
		case "plpgsql":
			return a.newBody(f, s, as, depth).plpgsql(stmtText, strVal(items[0]))
		case "sql":
			return a.newBody(f, s, as, depth).sql(strVal(items[0]))
		}
	}
	return nil
}

// bodyOptions finds the LANGUAGE (lang when there is none) and the AS
// option among the options of a DO block or CREATE FUNCTION.
func bodyOptions(opts []*pg.Node, lang string) (string, *pg.DefElem) {
	var as *pg.DefElem
	for _, n := range opts {
		d := n.GetDefElem()
		switch d.GetDefname() {
		case "language":
			lang = strVal(d.Arg)
		case "as":
			as = d
		}
	}
	return lang, as
}

func flattenLists(n *pg.Node, out *[]*pg.Node) {
	if l := n.GetList(); l != nil {
		for _, it := range l.Items {
			flattenLists(it, out)
		}
		return
	}
	if n != nil {
		*out = append(*out, n)
	}
}

// newBody prepares a body whose text is the string argument of as (nil for
// BEGIN ATOMIC bodies). By default the body is its own unit and transaction.
func (a *analysis) newBody(f *file, s *stmt, as *pg.DefElem, depth int) *body {
	b := &body{a: a, f: f, id: a.newID(), unit: a.newID(), txn: a.newID(), inBlock: true,
		start: s.pos, end: s.end, depth: depth + 1, owner: s}
	if as != nil && s.verbatim {
		if off := s.bodyArg(as); off != s.pos && off < len(f.src) {
			b.start, b.exact = bodyStart(f.src, off), true
		}
	}
	b.lines = []int{b.start}
	if b.exact {
		for i := b.start; i < b.end && i < len(f.src); i++ {
			if f.src[i] == '\n' {
				b.lines = append(b.lines, i+1)
			}
		}
	}
	return b
}

// bodyArg is the file offset of the string constant that holds the body
// named by as, the "as" option of s (a DO block or CREATE FUNCTION), or s.pos
// when it is unknown. The parser gives the option's own location only (its
// ArgLocation field is left 0): for DO that is the string itself; for CREATE
// FUNCTION it is the AS keyword, and the string is the next token.
func (s *stmt) bodyArg(as *pg.DefElem) int {
	off, end := s.at(as.Location), min(s.end, len(s.f.src))
	if off == s.pos || off >= end {
		return s.pos
	}
	if _, ok := s.node.(*pg.CreateFunctionStmt); !ok {
		return off
	}
	sc, err := pgquery.Scan(s.f.src[off:end])
	if err != nil || len(sc.Tokens) == 0 || sc.Tokens[0].Token != pg.Token_AS {
		return s.pos
	}
	for _, t := range sc.Tokens[1:] {
		if t.Token != pg.Token_SQL_COMMENT && t.Token != pg.Token_C_COMMENT {
			return off + int(t.Start)
		}
	}
	return s.pos
}

// bodyStart skips the opening quote of the string constant at off.
func bodyStart(src string, off int) int {
	rest := src[off:]
	switch {
	case strings.HasPrefix(rest, "$"):
		if j := strings.IndexByte(rest[1:], '$'); j >= 0 {
			return off + j + 2
		}
	case strings.HasPrefix(rest, "'"):
		return off + 1
	case len(rest) > 1 && (rest[0] == 'E' || rest[0] == 'e') && rest[1] == '\'':
		return off + 2
	case len(rest) > 2 && (rest[0] == 'U' || rest[0] == 'u') && rest[1] == '&' && rest[2] == '\'':
		return off + 3
	}
	return off
}

// lineOffset is the file offset of line n (1-based) of the body.
func (b *body) lineOffset(n int) int {
	if n < 1 || !b.exact {
		return b.start
	}
	if n > len(b.lines) {
		return b.lines[len(b.lines)-1]
	}
	return b.lines[n-1]
}

// find locates q in the body's source at or after from, skipping places
// already given to an earlier event, or returns -1.
func (b *body) find(q string, from int) int {
	if !b.exact || q == "" || from > b.end || b.end > len(b.f.src) {
		return -1
	}
	for from <= b.end {
		i := strings.Index(b.f.src[from:b.end], q)
		if i < 0 {
			return -1
		}
		if !b.used[from+i] {
			if b.used == nil {
				b.used = map[int]bool{}
			}
			b.used[from+i] = true
			return from + i
		}
		from += i + 1
	}
	return -1
}

// findWord locates the identifier or symbol w (case-insensitively, on word
// boundaries when w is a word) at or after from, or returns -1.
func (b *body) findWord(w string, from int) int {
	if !b.exact || w == "" || from > b.end || b.end > len(b.f.src) {
		return -1
	}
	pat := regexp.QuoteMeta(w)
	if isWord(w) {
		pat = `\b` + pat + `\b`
	}
	re, err := regexp.Compile(`(?i)` + pat)
	if err != nil {
		return -1
	}
	if loc := re.FindStringIndex(b.f.src[from:b.end]); loc != nil {
		return from + loc[0]
	}
	return -1
}

func isWord(w string) bool {
	for _, r := range w {
		if !(r == '_' || r == '$' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r > 127) {
			return false
		}
	}
	return true
}

// txEndAt places the COMMIT or ROLLBACK of a PL/pgSQL statement at line
// lineno: the first unused COMMIT/ROLLBACK token on or after that line that
// starts a statement.
func (b *body) txEndAt(lineno int) int {
	from := b.lineOffset(lineno) - b.start
	prev := ""
	for _, t := range b.tokens {
		start, end := int(t.Start), int(t.End)
		if start < 0 || end > len(b.text) || start > end {
			continue
		}
		word := strings.ToLower(b.text[start:end])
		if t.Token == pg.Token_SQL_COMMENT || t.Token == pg.Token_C_COMMENT {
			continue
		}
		if start >= from && (word == "commit" || word == "rollback") && !b.used[b.start+start] {
			switch prev {
			case ";", "begin", "then", "else", "loop", "":
				if b.used == nil {
					b.used = map[int]bool{}
				}
				b.used[b.start+start] = true
				return b.start + start
			}
		}
		prev = word
	}
	return b.skipSpace(b.lineOffset(lineno))
}

func (b *body) skipSpace(off int) int {
	if !b.exact {
		return b.start
	}
	return skipSpaceAndComments(b.f.src, off, min(b.end, len(b.f.src)))
}

// scanComments records the comments inside the body text.
func (b *body) scanComments(text string) {
	if !b.exact {
		return
	}
	sc, err := pgquery.Scan(text)
	if err != nil {
		return
	}
	b.tokens, b.text = sc.Tokens, text
	eachComment(sc.Tokens, text, func(start, end int) {
		b.f.comments = append(b.f.comments, comment{pos: b.start + start, text: text[start:end], unit: b.unit})
	})
}

// sql expands a LANGUAGE sql function body.
func (b *body) sql(text string) *Error {
	tree, err := pgquery.Parse(text)
	if err != nil {
		if !b.exact {
			return b.f.errorAt(b.owner.pos, "in SQL function body: "+err.Error())
		}
		return b.f.parserError(err, text, b.start, "in SQL function body: ")
	}
	b.scanComments(text)
	for _, raw := range tree.Stmts {
		b.addParsed(raw, text, 0, b.start, b.exact, "", false)
	}
	return nil
}

// addParsed adds one statement parsed from text, a fragment whose byte
// prefix is not source and whose text[prefix:] starts at file offset base.
func (b *body) addParsed(raw *pg.RawStmt, text string, prefix, base int, verbatim bool, assign string, dynamic bool) {
	m := unwrap(raw.Stmt)
	if m == nil {
		return
	}
	loc := int(raw.StmtLocation)
	end := loc + int(raw.StmtLen)
	if raw.StmtLen == 0 || end > len(text) {
		end = len(text)
	}
	if loc < 0 || loc > end {
		return
	}
	s := &stmt{f: b.f, node: m, unit: b.unit, txn: b.txn, body: b.id, inBlock: b.inBlock,
		base: base, prefix: prefix, verbatim: verbatim && !dynamic, assign: assign}
	s.pos = base
	if s.verbatim {
		if p := skipSpaceAndComments(text, loc, end); p >= prefix {
			s.pos = base + p - prefix
		}
	}
	s.end = s.pos
	if s.verbatim && end >= prefix {
		s.end = base + end - prefix
	}
	s.nodes = collectNodes(m)
	b.f.stmts = append(b.f.stmts, s)
	if s.verbatim && loc >= prefix {
		// A DO block or function created inside this body: its locations
		// are those of this fragment, mapped through s.at.
		_ = b.a.expandBodies(b.f, s, text[loc:end], b.depth)
	}
}
