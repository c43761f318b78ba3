package resend

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	pg "github.com/pganalyze/pg_query_go/v6"
	pgquery "github.com/wasilibs/go-pgquery"
	"github.com/wasilibs/go-pgquery/parser"
)

// ErrWhere: --where is not a predicate resend runs. The message says what
// was refused, where, and how to write it instead.
var ErrWhere = errors.New("--where refused")

// Functions are the functions --where may call: immutable built-ins of
// pg_catalog that read their arguments and nothing else (no table, no
// setting, no clock), written unqualified or as pg_catalog.name. Every
// other function call is refused, whatever it does.
var Functions = []string{
	"abs", "btrim", "char_length", "character_length", "jsonb_array_length", "jsonb_extract_path",
	"jsonb_extract_path_text", "jsonb_typeof", "left", "length", "lower", "ltrim", "octet_length",
	"position", "replace", "right", "rtrim", "split_part", "starts_with", "strpos", "substr",
	"substring", "upper",
}

// hidden are functions the parser itself writes for SQL syntax: SIMILAR TO
// escapes its pattern with similar_to_escape.
var hidden = []string{"similar_to_escape"}

// Operators are the operators --where may use: comparison, arithmetic,
// text matching, and jsonb and array access and containment, resolved in
// pg_catalog only (resend runs with search_path = pg_catalog).
var Operators = []string{
	"=", "<>", "!=", "<", "<=", ">", ">=",
	"+", "-", "*", "/", "%", "||",
	"~~", "!~~", "~~*", "!~~*", "~", "!~", "~*", "!~*",
	"->", "->>", "#>", "#>>", "@>", "<@", "?", "?|", "?&", "&&",
}

// Types are the types --where may cast to (x::text, CAST(x AS int)).
var Types = []string{
	"bool", "boolean", "bpchar", "date", "float4", "float8", "int", "int2", "int4", "int8", "integer",
	"interval", "json", "jsonb", "numeric", "text", "timestamp", "timestamptz", "uuid", "varchar",
}

// Where is a checked --where predicate: one boolean expression over the
// outbox's columns.
type Where struct {
	// Text is the predicate as given, without surrounding blanks.
	Text string
	// Columns are the column names it reads, sorted, each once.
	Columns []string
}

// whereStart is what the predicate is parsed behind; its locations are
// offsets in this text.
const whereStart = "SELECT 1 WHERE "

// ParseWhere parses text with PostgreSQL's own parser (libpg_query) and
// checks that it is one plain boolean expression: no second statement or
// semicolon, no comment, no subquery, no parameter, no clause after it
// (ORDER BY, LIMIT, UNION …), and only column references, constants,
// AND/OR/NOT, comparisons and the Operators, IS [NOT] NULL/TRUE/FALSE,
// [NOT] IN (list), [NOT] BETWEEN, [NOT] LIKE/ILIKE/SIMILAR TO, IS [NOT]
// DISTINCT FROM, CASE, COALESCE, NULLIF, GREATEST, LEAST, ARRAY[…], row
// constructors, subscripts, casts to Types and calls of Functions. Column
// names are checked against the table later (CheckColumns): they need a
// connection, the syntax does not.
//
// Since text parsed alone is the whole WHERE clause of a statement with
// nothing after it, its parentheses are balanced and nothing in it can
// end the expression early: resend embeds it as "(" + Text + ")".
func ParseWhere(text string) (*Where, error) {
	text = strings.TrimSpace(text)
	if text == "" {
		return nil, fmt.Errorf("%w: the predicate is empty: give a boolean expression over the outbox's columns, e.g. --where \"event_type = 'order.created'\"", ErrWhere)
	}
	// The parser reads a C string: text after a NUL byte would never be
	// checked, yet be sent.
	if strings.ContainsRune(text, 0) || !utf8.ValidString(text) {
		return nil, fmt.Errorf("%w: it holds a NUL byte or is not valid UTF-8: give the expression as text", ErrWhere)
	}
	src := whereStart + text
	sc, err := pgquery.Scan(src)
	if err != nil {
		return nil, whereSyntax(err, text)
	}
	for _, t := range sc.Tokens {
		switch t.Token {
		case pg.Token_ASCII_59:
			return nil, fmt.Errorf("%w: %s: a semicolon ends a statement, and --where is one expression, not statements: remove it", ErrWhere, at(text, int(t.Start)))
		case pg.Token_SQL_COMMENT, pg.Token_C_COMMENT:
			return nil, fmt.Errorf("%w: %s: comments are not allowed in --where: remove it", ErrWhere, at(text, int(t.Start)))
		}
	}
	tree, err := pgquery.Parse(src)
	if err != nil {
		return nil, whereSyntax(err, text)
	}
	if len(tree.Stmts) != 1 {
		return nil, fmt.Errorf("%w: it holds %d statements; give one boolean expression", ErrWhere, len(tree.Stmts))
	}
	sel := tree.Stmts[0].GetStmt().GetSelectStmt()
	if sel == nil || sel.WhereClause == nil || !onlyWhere(sel) {
		return nil, fmt.Errorf("%w: %q is not one boolean expression (a clause such as ORDER BY, LIMIT, GROUP BY or UNION follows it): give the condition alone", ErrWhere, text)
	}
	c := &checker{text: text, cols: map[string]bool{}}
	if err := c.expr(sel.WhereClause); err != nil {
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
			return fmt.Errorf("%w: column %q is not a column of %s; its columns are %s", ErrWhere, c, table, strings.Join(have, ", "))
		}
	}
	return nil
}

// onlyWhere: the statement is SELECT <our 1> WHERE <predicate>, nothing
// else.
func onlyWhere(s *pg.SelectStmt) bool {
	return len(s.TargetList) == 1 && len(s.DistinctClause) == 0 && s.IntoClause == nil &&
		len(s.FromClause) == 0 && len(s.GroupClause) == 0 && s.HavingClause == nil &&
		len(s.WindowClause) == 0 && len(s.ValuesLists) == 0 && len(s.SortClause) == 0 &&
		s.LimitOffset == nil && s.LimitCount == nil && len(s.LockingClause) == 0 &&
		s.WithClause == nil && s.Op == pg.SetOperation_SETOP_NONE
}

// whereSyntax is the parser's error, located in the predicate.
func whereSyntax(err error, text string) error {
	var pe *parser.Error
	if errors.As(err, &pe) {
		msg := pe.Message
		if pe.Cursorpos > 0 {
			// Cursorpos is 1-based, in characters of whereStart + text.
			msg += " at character " + fmt.Sprint(pe.Cursorpos-utf8.RuneCountInString(whereStart))
		}
		return fmt.Errorf("%w: PostgreSQL's parser: %s: give one boolean expression over the outbox's columns", ErrWhere, msg)
	}
	return fmt.Errorf("%w: PostgreSQL's parser: %v", ErrWhere, err)
}

// at names the place of byte offset loc of whereStart + text: its
// character position in text and the text from there.
func at(text string, loc int) string {
	off := loc - len(whereStart)
	if off < 0 || off > len(text) {
		return "in " + fmt.Sprintf("%q", text)
	}
	rest := text[off:]
	if utf8.RuneCountInString(rest) > 30 {
		rest = string([]rune(rest)[:30]) + "…"
	}
	return fmt.Sprintf("at character %d (%q)", utf8.RuneCountInString(text[:off])+1, rest)
}

// checker walks an expression tree: every node kind not listed is
// refused (default deny).
type checker struct {
	text  string
	cols  map[string]bool
	depth int
}

// maxDepth bounds nesting: a predicate is a condition, not a program.
const maxDepth = 64

func (c *checker) refuse(loc int32, what, fix string) error {
	return fmt.Errorf("%w: %s %s is not allowed: %s", ErrWhere, what, at(c.text, int(loc)), fix)
}

func (c *checker) list(ns []*pg.Node) error {
	for _, n := range ns {
		if err := c.expr(n); err != nil {
			return err
		}
	}
	return nil
}

func (c *checker) expr(n *pg.Node) error {
	if n == nil {
		return nil
	}
	c.depth++
	defer func() { c.depth-- }()
	if c.depth > maxDepth {
		return fmt.Errorf("%w: the expression is nested more than %d levels deep", ErrWhere, maxDepth)
	}
	switch x := n.Node.(type) {
	case *pg.Node_AConst:
		return nil
	case *pg.Node_ColumnRef:
		return c.column(x.ColumnRef)
	case *pg.Node_BoolExpr:
		return c.list(x.BoolExpr.Args)
	case *pg.Node_AExpr:
		return c.aexpr(x.AExpr)
	case *pg.Node_NullTest:
		return c.expr(x.NullTest.Arg)
	case *pg.Node_BooleanTest:
		return c.expr(x.BooleanTest.Arg)
	case *pg.Node_TypeCast:
		if err := c.typeName(x.TypeCast.TypeName, x.TypeCast.Location); err != nil {
			return err
		}
		return c.expr(x.TypeCast.Arg)
	case *pg.Node_FuncCall:
		return c.funcCall(x.FuncCall)
	case *pg.Node_CaseExpr:
		if err := c.expr(x.CaseExpr.Arg); err != nil {
			return err
		}
		if err := c.list(x.CaseExpr.Args); err != nil {
			return err
		}
		return c.expr(x.CaseExpr.Defresult)
	case *pg.Node_CaseWhen:
		if err := c.expr(x.CaseWhen.Expr); err != nil {
			return err
		}
		return c.expr(x.CaseWhen.Result)
	case *pg.Node_CoalesceExpr:
		return c.list(x.CoalesceExpr.Args)
	case *pg.Node_MinMaxExpr:
		return c.list(x.MinMaxExpr.Args)
	case *pg.Node_AArrayExpr:
		return c.list(x.AArrayExpr.Elements)
	case *pg.Node_RowExpr:
		return c.list(x.RowExpr.Args)
	case *pg.Node_List:
		return c.list(x.List.Items)
	case *pg.Node_AIndirection:
		if err := c.expr(x.AIndirection.Arg); err != nil {
			return err
		}
		for _, ind := range x.AIndirection.Indirection {
			ix, ok := ind.Node.(*pg.Node_AIndices)
			if !ok {
				return fmt.Errorf("%w: a field selection ((x).field or x.*) is not allowed: use ->, ->> or a subscript", ErrWhere)
			}
			if err := c.expr(ix.AIndices.Lidx); err != nil {
				return err
			}
			if err := c.expr(ix.AIndices.Uidx); err != nil {
				return err
			}
		}
		return nil
	case *pg.Node_SubLink:
		return c.refuse(x.SubLink.Location, "a subquery", "--where reads the outbox row alone; choose rows by their own columns (use --key for a list of keys)")
	case *pg.Node_ParamRef:
		return c.refuse(x.ParamRef.Location, "a parameter", "write the value itself")
	case *pg.Node_SqlvalueFunction:
		return c.refuse(x.SqlvalueFunction.Location, "a value of the session (CURRENT_TIMESTAMP, CURRENT_USER …)", "give times with --since and --until, and constants otherwise")
	case *pg.Node_CollateClause:
		return c.refuse(x.CollateClause.Location, "COLLATE", "compare with the column's own collation")
	}
	return fmt.Errorf("%w: %s is not a plain boolean expression over the outbox's columns (%s is not allowed)", ErrWhere, fmt.Sprintf("%q", c.text), nodeName(n))
}

// nodeName is the parse tree's name of n's kind (e.g. XmlExpr).
func nodeName(n *pg.Node) string {
	m := n.ProtoReflect()
	fd := m.WhichOneof(m.Descriptor().Oneofs().Get(0))
	if fd == nil {
		return "an empty node"
	}
	return string(fd.Message().Name())
}

func (c *checker) column(r *pg.ColumnRef) error {
	if len(r.Fields) != 1 {
		return c.refuse(r.Location, "a qualified column or *", "write the column name alone, e.g. event_type")
	}
	s, ok := r.Fields[0].Node.(*pg.Node_String_)
	if !ok {
		return c.refuse(r.Location, "*", "name the column")
	}
	c.cols[s.String_.Sval] = true
	return nil
}

func (c *checker) aexpr(a *pg.A_Expr) error {
	switch a.Kind {
	case pg.A_Expr_Kind_AEXPR_OP, pg.A_Expr_Kind_AEXPR_OP_ANY, pg.A_Expr_Kind_AEXPR_OP_ALL,
		pg.A_Expr_Kind_AEXPR_DISTINCT, pg.A_Expr_Kind_AEXPR_NOT_DISTINCT, pg.A_Expr_Kind_AEXPR_NULLIF,
		pg.A_Expr_Kind_AEXPR_IN, pg.A_Expr_Kind_AEXPR_LIKE, pg.A_Expr_Kind_AEXPR_ILIKE,
		pg.A_Expr_Kind_AEXPR_SIMILAR, pg.A_Expr_Kind_AEXPR_BETWEEN, pg.A_Expr_Kind_AEXPR_NOT_BETWEEN,
		pg.A_Expr_Kind_AEXPR_BETWEEN_SYM, pg.A_Expr_Kind_AEXPR_NOT_BETWEEN_SYM:
	default:
		return c.refuse(a.Location, "expression kind "+a.Kind.String(), "use comparisons, IN, BETWEEN, LIKE and the operators listed in docs/resend.md")
	}
	name, schema := qualified(a.Name)
	if schema != "" && schema != "pg_catalog" {
		return c.refuse(a.Location, "operator "+schema+"."+name, "use the built-in operators (pg_catalog)")
	}
	// BETWEEN's name is the keyword, not an operator.
	between := a.Kind >= pg.A_Expr_Kind_AEXPR_BETWEEN
	if !between && !slices.Contains(Operators, name) {
		return c.refuse(a.Location, "operator "+name, "use one of "+strings.Join(Operators, " "))
	}
	if err := c.expr(a.Lexpr); err != nil {
		return err
	}
	return c.expr(a.Rexpr)
}

func (c *checker) funcCall(f *pg.FuncCall) error {
	name, schema := qualified(f.Funcname)
	full := name
	if schema != "" {
		full = schema + "." + name
	}
	if schema != "" && schema != "pg_catalog" {
		return c.refuse(f.Location, "function "+full+"()", "--where calls only these immutable built-in functions: "+strings.Join(Functions, ", "))
	}
	if !slices.Contains(Functions, name) && !(schema == "pg_catalog" && slices.Contains(hidden, name)) {
		return c.refuse(f.Location, "function "+full+"()", "--where calls only these immutable built-in functions: "+strings.Join(Functions, ", "))
	}
	if f.Over != nil || len(f.AggOrder) > 0 || f.AggFilter != nil || f.AggStar || f.AggDistinct || f.AggWithinGroup || f.FuncVariadic {
		return c.refuse(f.Location, "an aggregate, window or VARIADIC call of "+full+"()", "call the function on the row's own values")
	}
	return c.list(f.Args)
}

func (c *checker) typeName(t *pg.TypeName, loc int32) error {
	if t == nil {
		return nil
	}
	name, schema := qualified(t.Names)
	if (schema != "" && schema != "pg_catalog") || !slices.Contains(Types, name) || t.Setof || t.PctType {
		return c.refuse(loc, "a cast to "+strings.Trim(schema+"."+name, "."), "cast to one of "+strings.Join(Types, ", "))
	}
	for _, m := range t.Typmods {
		if _, ok := m.Node.(*pg.Node_AConst); !ok {
			return c.refuse(loc, "a type modifier that is not a constant", "write e.g. varchar(10)")
		}
	}
	return nil
}

// qualified splits a name list (operator, function or type) into its last
// name and its schema ("" when unqualified; a longer list keeps the
// catalog too, which is refused as a schema other than pg_catalog).
func qualified(list []*pg.Node) (name, schema string) {
	parts := make([]string, 0, len(list))
	for _, n := range list {
		parts = append(parts, n.GetString_().GetSval())
	}
	if len(parts) == 0 {
		return "", ""
	}
	return parts[len(parts)-1], strings.Join(parts[:len(parts)-1], ".")
}
