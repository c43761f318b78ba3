package lint

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	pgquery "github.com/wasilibs/go-pgquery"
	"github.com/wasilibs/go-pgquery/parser"
)

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

// maxPLNesting bounds how deep PL/pgSQL blocks and IF, LOOP and CASE
// statements may nest in a body handed to the PL/pgSQL compiler. libpg_query
// runs as WebAssembly with a 64 KiB C stack and no guard below it: a body
// nested about 48 deep overflows the stack into the module's static data, the
// compile still succeeds, and every later parse in the process (the next
// files of the run) fails or goes wrong. The limit leaves a margin;
// hand-written code seldom nests a fifth as deep.
const maxPLNesting = 32

// plpgsql expands a PL/pgSQL body: stmtText is the whole CREATE FUNCTION or
// DO statement, which libpg_query compiles, and code the body's source.
func (b *body) plpgsql(stmtText, code string) *Error {
	if at := plTooDeep(code); at >= 0 {
		off := b.owner.pos
		if b.exact && b.bodyText() == code {
			off = b.start + at
		}
		return b.f.errorAt(off, fmt.Sprintf("in PL/pgSQL body: blocks and IF, LOOP and CASE statements nest more than %d deep, more than walpost lint's parser can compile", maxPLNesting))
	}
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

// plTooDeep returns the offset in code of the first token that opens a
// block or an IF, LOOP or CASE statement more than maxPLNesting deep, or -1.
// The PL/pgSQL compiler reads code with the SQL lexer, so its tokens tell the
// structure: BEGIN and LOOP open, so do IF and CASE where a statement starts,
// a CASE elsewhere opens an expression, END closes whatever is open, and the
// IF, LOOP or CASE right after an END that closed a statement belongs to it.
// A word such as a column named loop may be counted as an opener: the depth
// is never under-counted. When code does not lex, -1: the compiler then
// rejects it before compiling.
func plTooDeep(code string) int {
	sc, err := pgquery.Scan(code)
	if err != nil {
		return -1
	}
	var open []bool // true: a statement, false: a CASE expression
	depth, prev, closedStmt := 0, ";", false
	for _, t := range sc.Tokens {
		start, end := int(t.Start), int(t.End)
		if t.Token == pg.Token_SQL_COMMENT || t.Token == pg.Token_C_COMMENT || start < 0 || end > len(code) || start > end {
			continue
		}
		word := strings.ToLower(code[start:end])
		stmtStart := false
		switch prev {
		case ";", "begin", "then", "else", "loop":
			stmtStart = true
		}
		qualifier := closedStmt && (word == "if" || word == "loop" || word == "case")
		closedStmt = false
		switch {
		case qualifier:
		case word == "begin" || word == "loop" || (word == "if" || word == "case") && stmtStart:
			open = append(open, true)
			if depth++; depth > maxPLNesting {
				return start
			}
		case word == "case":
			open = append(open, false)
		case word == "end" && len(open) > 0:
			if closedStmt = open[len(open)-1]; closedStmt {
				depth--
			}
			open = open[:len(open)-1]
		}
		prev = word
	}
	return -1
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
