package lint

import (
	"errors"
	"sort"
	"unicode/utf8"

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
