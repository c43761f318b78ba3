package lint

import (
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	pg "github.com/pganalyze/pg_query_go/v6"
	pgquery "github.com/wasilibs/go-pgquery"
	"google.golang.org/protobuf/proto"
)

var gooseRE = regexp.MustCompile(`(?i)^--\s*\+goose\s+(.*?)\s*$`)

// parseFile parses one file into statements. A nil *Error means success.
func parseFile(a *analysis, name string, raw []byte) (*file, *Error) {
	f := newFile(name, raw)
	if e := checkEncoding(f, raw); e != nil {
		return nil, e
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
	topComments, sectionStarts, gooseFile, gooseNoTx := scanComments(text)
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
	var tx txnState
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
			tx.inBlock = gooseFile && !gooseNoTx && sec > 0
			tx.txn = a.newID()
		}
		s := &stmt{f: f, node: unwrap(raw.Stmt), pos: pos, end: end, unit: unitOf(section), verbatim: true}
		if s.node == nil {
			continue
		}
		tx.assign(a, s)
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

// checkEncoding refuses a file PostgreSQL would not accept as SQL text: a NUL byte or invalid UTF-8.
func checkEncoding(f *file, raw []byte) *Error {
	if i := slices.Index(raw, 0); i >= 0 {
		return f.errorAt(i, "file contains a NUL byte, which PostgreSQL does not accept in SQL text")
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
		return f.errorAt(i, "file is not valid UTF-8")
	}
	return nil
}

// scanComments returns text's comments, where its goose sections start and whether it is a goose file without transactions.
func scanComments(text string) (topComments []comment, sectionStarts []int, gooseFile, gooseNoTx bool) {
	sc, err := pgquery.Scan(text)
	if err != nil {
		return nil, nil, false, false
	}
	eachComment(sc.Tokens, text, func(start, end int) {
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
	})
	return topComments, sectionStarts, gooseFile, gooseNoTx
}

// eachComment calls fn with the byte range in text of each comment token
// of a scan of text (one whose range lies outside text is passed over).
func eachComment(tokens []*pg.ScanToken, text string, fn func(start, end int)) {
	for _, t := range tokens {
		if t.Token != pg.Token_SQL_COMMENT && t.Token != pg.Token_C_COMMENT {
			continue
		}
		start, end := int(t.Start), int(t.End)
		if start < 0 || end > len(text) || start > end {
			continue
		}
		fn(start, end)
	}
}

// txnState is the transaction the next top-level statement of a file runs in.
type txnState struct {
	inBlock bool // inside BEGIN … COMMIT, or a goose section run in one transaction
	txn     int
}

// assign gives s its transaction and moves the state past s.
func (st *txnState) assign(a *analysis, s *stmt) {
	if ts, ok := s.node.(*pg.TransactionStmt); ok {
		switch ts.Kind {
		case pg.TransactionStmtKind_TRANS_STMT_BEGIN, pg.TransactionStmtKind_TRANS_STMT_START:
			if !st.inBlock {
				st.inBlock, st.txn = true, a.newID()
			}
			s.txn, s.inBlock = st.txn, true
		case pg.TransactionStmtKind_TRANS_STMT_COMMIT, pg.TransactionStmtKind_TRANS_STMT_ROLLBACK,
			pg.TransactionStmtKind_TRANS_STMT_PREPARE:
			s.txn, s.inBlock = st.txn, st.inBlock
			st.inBlock, st.txn = false, a.newID()
			if ts.Chain {
				st.inBlock = true
			}
		default:
			s.txn, s.inBlock = st.txn, st.inBlock
		}
		return
	}
	if !st.inBlock {
		st.txn = a.newID()
	}
	s.txn, s.inBlock = st.txn, st.inBlock
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
