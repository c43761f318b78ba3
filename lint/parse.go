package lint

import (
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	pg "github.com/pganalyze/pg_query_go/v6"
	pgquery "github.com/wasilibs/go-pgquery"
	"github.com/wasilibs/go-pgquery/parser"
	"google.golang.org/protobuf/proto"
)

// analysis is one file set being linted.
type analysis struct {
	cfg    config
	files  []*file
	nextID int
	schema *schema // collected by collectSchema before the rules run
}

func (a *analysis) newID() int {
	a.nextID++
	return a.nextID
}

// file is a parsed source file.
type file struct {
	name       string
	src        string
	lineStarts []int
	stmts      []*stmt   // in position order once parseFile returns
	comments   []comment // top level and inside function bodies
}

type comment struct {
	pos  int // byte offset in file.src
	text string
	unit int
}

// stmt is one SQL statement: top level, or embedded in a function body or
// DO block.
//
// unit groups statements that run as one script: a file (or goose section),
// with the DO blocks it runs inline, or one function body. txn groups
// statements that commit together: an explicit BEGIN … COMMIT block, a goose
// migration's implicit transaction, a function body (it runs inside its
// caller's transaction) up to a COMMIT in a procedure, or a lone autocommit
// statement.
type stmt struct {
	f    *file
	node proto.Message // concrete statement, e.g. *pg.InsertStmt
	pos  int           // byte offset in f.src of the statement's first token
	end  int           // byte offset just past the statement

	unit    int
	txn     int
	body    int  // 0 at top level, else the function body / DO block id
	inBlock bool // false only for a top-level statement in autocommit mode

	// Node locations are byte offsets in the parsed text; for embedded
	// statements the text is a fragment of f.src (verbatim) starting at base,
	// after prefix bytes the linter added (e.g. "SELECT " before a PL/pgSQL
	// expression).
	base     int
	prefix   int
	verbatim bool

	// assign is the PL/pgSQL variable this expression is assigned to (x :=
	// expr, or a declaration's default), "" otherwise.
	assign string

	nodes []proto.Message // every node under node, pre-order
}

// at maps a node location to a byte offset in the file; unknown locations
// map to the statement start.
func (s *stmt) at(loc int32) int {
	if loc < 0 || !s.verbatim || int(loc) < s.prefix {
		return s.pos
	}
	off := s.base + int(loc) - s.prefix
	if off < 0 || off > len(s.f.src) {
		return s.pos
	}
	return off
}

// posOf is the statement start when m is the statement itself, else the
// location loc inside it.
func (s *stmt) posOf(m proto.Message, loc int32) int {
	if m == s.node {
		return s.pos
	}
	return s.at(loc)
}

func newFile(name string, src []byte) *file {
	f := &file{name: name, src: string(src), lineStarts: []int{0}}
	for i := 0; i < len(f.src); i++ {
		if f.src[i] == '\n' {
			f.lineStarts = append(f.lineStarts, i+1)
		}
	}
	return f
}

// lineCol converts a byte offset to a 1-based line and a 1-based column in
// characters.
func (f *file) lineCol(off int) (int, int) {
	off = max(0, min(off, len(f.src)))
	i := sort.Search(len(f.lineStarts), func(i int) bool { return f.lineStarts[i] > off }) - 1
	i = max(i, 0)
	return i + 1, utf8.RuneCountInString(f.src[f.lineStarts[i]:off]) + 1
}

func (f *file) errorAt(off int, msg string) *Error {
	l, c := f.lineCol(off)
	return &Error{File: f.name, Line: l, Column: c, Message: msg}
}

// charToByte converts PostgreSQL's 1-based character cursor in text to a
// byte offset.
func charToByte(text string, cursor int) int {
	if cursor <= 1 {
		return 0
	}
	n := 0
	for i := range text {
		if n == cursor-1 {
			return i
		}
		n++
	}
	return len(text)
}

// parserError turns an error of pg_query for text (which starts at byte
// base of the file) into an Error with the parser's message and position.
func (f *file) parserError(err error, text string, base int, what string) *Error {
	var pe *parser.Error
	if !errors.As(err, &pe) {
		return f.errorAt(base, what+err.Error())
	}
	off := base
	if pe.Cursorpos > 0 {
		off = base + charToByte(text, pe.Cursorpos)
	}
	return f.errorAt(off, what+pe.Message)
}

var gooseRE = regexp.MustCompile(`(?i)^--\s*\+goose\s+(.*?)\s*$`)

// parseFile parses one file into statements. A nil *Error means success.
func parseFile(a *analysis, name string, raw []byte) (*file, *Error) {
	f := newFile(name, raw)
	if i := slices.Index(raw, 0); i >= 0 {
		return nil, f.errorAt(i, "file contains a NUL byte, which PostgreSQL does not accept in SQL text")
	}
	if !utf8.Valid(raw) {
		i := 0
		for i < len(raw) {
			r, n := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			i += n
		}
		return nil, f.errorAt(i, "file is not valid UTF-8")
	}
	text := f.src
	if strings.HasPrefix(text, "\uFEFF") { // a byte-order mark: blank it, keep offsets
		text = "   " + text[3:]
	}
	tree, err := pgquery.Parse(text)
	if err != nil {
		return nil, f.parserError(err, text, 0, "")
	}

	// Comments, and the goose annotations among them.
	var sectionStarts []int
	gooseFile, gooseNoTx := false, false
	var topComments []comment
	if sc, err := pgquery.Scan(text); err == nil {
		for _, t := range sc.Tokens {
			if t.Token != pg.Token_SQL_COMMENT && t.Token != pg.Token_C_COMMENT {
				continue
			}
			start, end := int(t.Start), int(t.End)
			if start < 0 || end > len(text) || start > end {
				continue
			}
			c := comment{pos: start, text: text[start:end]}
			topComments = append(topComments, c)
			if m := gooseRE.FindStringSubmatch(c.text); m != nil {
				switch strings.ToLower(m[1]) {
				case "up", "down":
					gooseFile = true
					sectionStarts = append(sectionStarts, start)
				case "no transaction":
					gooseNoTx = true
				}
			}
		}
	}
	sectionOf := func(pos int) int {
		return sort.Search(len(sectionStarts), func(i int) bool { return sectionStarts[i] > pos })
	}
	units := map[int]int{}
	unitOf := func(section int) int {
		if u, ok := units[section]; ok {
			return u
		}
		units[section] = a.newID()
		return units[section]
	}
	for _, c := range topComments {
		c.unit = unitOf(sectionOf(c.pos))
		f.comments = append(f.comments, c)
	}

	// Statements, with the transaction state of each section.
	section := -1
	inBlock, txn := false, 0
	for _, raw := range tree.Stmts {
		loc := int(raw.StmtLocation)
		end := loc + int(raw.StmtLen)
		if raw.StmtLen == 0 || end > len(text) {
			end = len(text)
		}
		if loc < 0 || loc > end {
			continue
		}
		pos := skipSpaceAndComments(text, loc, end)
		if sec := sectionOf(pos); sec != section {
			section = sec
			// goose runs each section of a migration in one transaction
			// unless the file says NO TRANSACTION.
			inBlock = gooseFile && !gooseNoTx && sec > 0
			txn = a.newID()
		}
		s := &stmt{f: f, node: unwrap(raw.Stmt), pos: pos, end: end, unit: unitOf(section), verbatim: true}
		if s.node == nil {
			continue
		}
		if ts, ok := s.node.(*pg.TransactionStmt); ok {
			switch ts.Kind {
			case pg.TransactionStmtKind_TRANS_STMT_BEGIN, pg.TransactionStmtKind_TRANS_STMT_START:
				if !inBlock {
					inBlock, txn = true, a.newID()
				}
				s.txn, s.inBlock = txn, true
			case pg.TransactionStmtKind_TRANS_STMT_COMMIT, pg.TransactionStmtKind_TRANS_STMT_ROLLBACK,
				pg.TransactionStmtKind_TRANS_STMT_PREPARE:
				s.txn, s.inBlock = txn, inBlock
				inBlock, txn = false, a.newID()
				if ts.Chain {
					inBlock = true
				}
			default:
				s.txn, s.inBlock = txn, inBlock
			}
		} else {
			if !inBlock {
				txn = a.newID()
			}
			s.txn, s.inBlock = txn, inBlock
		}
		s.nodes = collectNodes(s.node)
		f.stmts = append(f.stmts, s)
		if e := a.expandBodies(f, s, text[loc:end], 0); e != nil {
			return nil, e
		}
	}
	slices.SortStableFunc(f.stmts, func(x, y *stmt) int { return x.pos - y.pos })
	slices.SortStableFunc(f.comments, func(x, y comment) int { return x.pos - y.pos })
	return f, nil
}

func collectNodes(m proto.Message) []proto.Message {
	var out []proto.Message
	walk(m, func(x proto.Message) bool {
		out = append(out, x)
		return true
	})
	return out
}

// skipSpaceAndComments returns the offset of the first token at or after
// from in text[:end].
func skipSpaceAndComments(text string, from, end int) int {
	i := from
	for i < end {
		switch {
		case text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r' || text[i] == '\f' || text[i] == '\v':
			i++
		case strings.HasPrefix(text[i:end], "--"):
			j := strings.IndexByte(text[i:end], '\n')
			if j < 0 {
				return end
			}
			i += j + 1
		case strings.HasPrefix(text[i:end], "/*"):
			depth, j := 1, i+2
			for j < end && depth > 0 {
				switch {
				case strings.HasPrefix(text[j:end], "/*"):
					depth++
					j += 2
				case strings.HasPrefix(text[j:end], "*/"):
					depth--
					j += 2
				default:
					j++
				}
			}
			i = j
		default:
			return i
		}
	}
	return min(i, end)
}

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
		lang := "plpgsql"
		var as *pg.DefElem
		for _, n := range x.Args {
			d := n.GetDefElem()
			switch d.GetDefname() {
			case "language":
				lang = strVal(d.Arg)
			case "as":
				as = d
			}
		}
		if as == nil || lang != "plpgsql" || as.Arg.GetString_() == nil {
			return nil
		}
		b := a.newBody(f, s, as, depth)
		b.unit, b.txn, b.inBlock = s.unit, s.txn, s.inBlock // runs inline, in the caller's transaction
		return b.plpgsql(stmtText)
	case *pg.CreateFunctionStmt:
		lang := ""
		var as *pg.DefElem
		for _, n := range x.Options {
			d := n.GetDefElem()
			switch d.GetDefname() {
			case "language":
				lang = strVal(d.Arg)
			case "as":
				as = d
			}
		}
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
			return a.newBody(f, s, as, depth).plpgsql(stmtText)
		case "sql":
			return a.newBody(f, s, as, depth).sql(strVal(items[0]))
		}
	}
	return nil
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
	for _, t := range sc.Tokens {
		if t.Token != pg.Token_SQL_COMMENT && t.Token != pg.Token_C_COMMENT {
			continue
		}
		start, end := int(t.Start), int(t.End)
		if start < 0 || end > len(text) || start > end {
			continue
		}
		b.f.comments = append(b.f.comments, comment{pos: b.start + start, text: text[start:end], unit: b.unit})
	}
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

type plEventKind int

const (
	evSQL   plEventKind = iota // an SQL statement or expression
	evTxEnd                    // COMMIT or ROLLBACK inside a procedure or DO block
)

type plEvent struct {
	kind     plEventKind
	pos      int
	sql      string
	prefix   int
	base     int
	verbatim bool
	assign   string
	dynamic  bool
}

// plpgsql expands a PL/pgSQL body: stmtText is the whole CREATE FUNCTION or
// DO statement, which libpg_query compiles.
func (b *body) plpgsql(stmtText string) *Error {
	out, err := pgquery.ParsePlPgSqlToJSON(stmtText)
	if err != nil {
		return b.plpgsqlError(err)
	}
	var funcs []any
	if err := json.Unmarshal([]byte(out), &funcs); err != nil {
		return b.f.errorAt(b.owner.pos, "cannot read the PL/pgSQL parse tree: "+err.Error())
	}
	if b.exact {
		if txt := b.bodyText(); txt != "" {
			b.scanComments(txt)
		}
	}
	b.walkPL(funcs, "", 1, "", false)
	slices.SortStableFunc(b.events, func(x, y plEvent) int { return x.pos - y.pos })
	for _, ev := range b.events {
		if ev.kind == evTxEnd {
			b.txn = b.a.newID()
			continue
		}
		tree, err := pgquery.Parse(ev.sql)
		if err != nil {
			continue // the PL/pgSQL compiler checked the syntax; what it let through is not ours to judge
		}
		for _, raw := range tree.Stmts {
			if ev.dynamic {
				b.dynamic(raw, ev)
				continue
			}
			b.addParsed(raw, ev.sql, ev.prefix, ev.base, ev.verbatim, ev.assign, false)
		}
	}
	return nil
}

// dynamic handles EXECUTE 'constant SQL': the string is parsed as SQL, with
// every position at the EXECUTE.
func (b *body) dynamic(raw *pg.RawStmt, ev plEvent) {
	sel := unwrap(raw.Stmt)
	ss, ok := sel.(*pg.SelectStmt)
	if !ok || len(ss.TargetList) != 1 {
		return
	}
	c := stripCasts(ss.TargetList[0].GetResTarget().GetVal()).GetAConst()
	if c == nil || c.GetSval() == nil {
		return
	}
	text := c.GetSval().Sval
	tree, err := pgquery.Parse(text)
	if err != nil {
		return
	}
	for _, r := range tree.Stmts {
		b.addParsed(r, text, 0, ev.base, false, "", true)
	}
}

// bodyText is the source of the body (dollar-quoted bodies only).
func (b *body) bodyText() string {
	if b.start < 2 || b.start > len(b.f.src) || b.f.src[b.start-1] != '$' {
		return ""
	}
	i := strings.LastIndexByte(b.f.src[:b.start-1], '$')
	if i < 0 {
		return ""
	}
	tag := b.f.src[i:b.start]
	j := strings.Index(b.f.src[b.start:min(b.end, len(b.f.src))], tag)
	if j < 0 {
		return ""
	}
	return b.f.src[b.start : b.start+j]
}

var (
	nearLineRE = regexp.MustCompile(`near line (\d+)`)
	quotedRE   = regexp.MustCompile(`"((?:[^"]|"")*)"`)
)

func (b *body) plpgsqlError(err error) *Error {
	var pe *parser.Error
	if !errors.As(err, &pe) {
		return b.f.errorAt(b.owner.pos, "in PL/pgSQL body: "+err.Error())
	}
	off := b.owner.pos
	if b.exact {
		off = b.skipSpace(b.start)
		if m := nearLineRE.FindStringSubmatch(pe.Context); m != nil {
			if n, err := strconv.Atoi(m[1]); err == nil {
				off = b.skipSpace(b.lineOffset(n))
			}
		}
		switch m := quotedRE.FindStringSubmatch(pe.Message); {
		case strings.Contains(pe.Message, "at end of input"):
			if txt := b.bodyText(); txt != "" {
				off = b.start + len(txt)
			}
		case m != nil:
			if p := b.findWord(strings.ReplaceAll(m[1], `""`, `"`), off); p >= 0 {
				off = p
			}
		}
	}
	return b.f.errorAt(off, "in PL/pgSQL body: "+pe.Message)
}

// walkPL collects SQL expressions and transaction ends from the JSON tree
// libpg_query produces for a PL/pgSQL function. via is the key under which v
// sits; lineno the line of the innermost PL/pgSQL statement. Keys are visited
// in sorted order so that events are collected deterministically.
func (b *body) walkPL(v any, via string, lineno int, assign string, dynamic bool) {
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			b.walkPL(e, via, lineno, assign, dynamic)
		}
	case map[string]any:
		if l, ok := x["lineno"].(float64); ok && l >= 1 && l < 1e9 {
			lineno = int(l)
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			val := x[k]
			switch k {
			case "PLpgSQL_expr":
				if m, ok := val.(map[string]any); ok {
					q, _ := m["query"].(string)
					mode, _ := m["parseMode"].(float64)
					b.expr(q, int(mode), lineno, assign, dynamic)
				}
				continue
			case "PLpgSQL_stmt_commit", "PLpgSQL_stmt_rollback":
				l := lineno
				if m, ok := val.(map[string]any); ok {
					if n, ok := m["lineno"].(float64); ok && n >= 1 && n < 1e9 {
						l = int(n)
					}
				}
				b.events = append(b.events, plEvent{kind: evTxEnd, pos: b.txEndAt(l)})
				continue
			}
			childAssign := ""
			if k == "default_val" {
				childAssign, _ = x["refname"].(string)
			}
			b.walkPL(val, k, lineno, childAssign, k == "query" && via == "PLpgSQL_stmt_dynexecute")
		}
	}
}

// Parse modes of PLpgSQL_expr (PostgreSQL's RawParseMode).
const (
	modeDefault = 0 // a whole SQL statement
	modeExpr    = 2 // an expression
	modeAssign1 = 3 // target := expression
	modeAssign3 = 5
)

func (b *body) expr(q string, mode, lineno int, assign string, dynamic bool) {
	if strings.TrimSpace(q) == "" {
		return
	}
	lineOff := b.lineOffset(lineno)
	ev := plEvent{kind: evSQL, assign: assign, dynamic: dynamic}
	switch {
	case mode == modeDefault:
		ev.sql = q
		if p := b.find(q, lineOff); p >= 0 {
			ev.base, ev.verbatim = p, true
		} else if rest, ok := strings.CutPrefix(q, "SELECT "); ok { // PERFORM x is stored as SELECT x
			if p := b.find(rest, lineOff); p >= 0 {
				ev.base, ev.prefix, ev.verbatim = p, len("SELECT "), true
			}
		}
	case mode == modeExpr:
		ev.sql, ev.prefix = "SELECT "+q, len("SELECT ")
		if p := b.find(q, lineOff); p >= 0 {
			ev.base, ev.verbatim = p, true
		}
	case mode >= modeAssign1 && mode <= modeAssign3:
		i, n := strings.Index(q, ":="), 2
		if i < 0 {
			i, n = strings.IndexByte(q, '='), 1
		}
		if i < 0 {
			return
		}
		ev.assign = strings.TrimSpace(q[:i])
		ev.sql, ev.prefix = "SELECT "+q[i+n:], len("SELECT ")
		if p := b.find(q, lineOff); p >= 0 {
			ev.base, ev.verbatim = p+i+n, true
		}
	default:
		return
	}
	if !ev.verbatim {
		ev.base = b.skipSpace(lineOff)
	}
	ev.pos = ev.base
	b.events = append(b.events, ev)
}
