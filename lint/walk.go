package lint

import (
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// walk calls fn for every node message under m (m included) in pre-order;
// fn returning false skips that node's children. The *pg.Node and *pg.List
// wrappers are transparent. A CreateFunctionStmt's sql_body is not entered:
// the statements of a BEGIN ATOMIC body are statements of their own unit.
func walk(m proto.Message, fn func(proto.Message) bool) {
	if m == nil {
		return
	}
	walkReflect(m.ProtoReflect(), fn)
}

func walkReflect(m protoreflect.Message, fn func(proto.Message) bool) {
	if !m.IsValid() {
		return
	}
	msg := m.Interface()
	switch msg.(type) {
	case *pg.Node, *pg.List:
	default:
		if !fn(msg) {
			return
		}
	}
	_, isFunc := msg.(*pg.CreateFunctionStmt)
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind || fd.IsMap() {
			return true
		}
		if isFunc && fd.Name() == "sql_body" {
			return true
		}
		if fd.IsList() {
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				walkReflect(l.Get(i).Message(), fn)
			}
			return true
		}
		walkReflect(v.Message(), fn)
		return true
	})
}

// unwrap returns the concrete message inside a *pg.Node, or nil.
func unwrap(n *pg.Node) proto.Message {
	if n == nil {
		return nil
	}
	m := n.ProtoReflect()
	od := m.Descriptor().Oneofs().Get(0)
	fd := m.WhichOneof(od)
	if fd == nil {
		return nil
	}
	return m.Get(fd).Message().Interface()
}

// location returns the "location" field of a node message, or -1.
func location(m proto.Message) int32 {
	if m == nil {
		return -1
	}
	r := m.ProtoReflect()
	fd := r.Descriptor().Fields().ByName("location")
	if fd == nil || fd.Kind() != protoreflect.Int32Kind {
		return -1
	}
	return int32(r.Get(fd).Int())
}

// firstLocation is the smallest location in the tree under m, or -1.
func firstLocation(m proto.Message) int32 {
	best := int32(-1)
	walk(m, func(x proto.Message) bool {
		if l := location(x); l >= 0 && (best < 0 || l < best) {
			best = l
		}
		return true
	})
	return best
}

// strVal is the string of a String node, or "".
func strVal(n *pg.Node) string {
	return n.GetString_().GetSval()
}

// names joins a qualified name list (funcname, typename) with dots.
func names(list []*pg.Node) []string {
	out := make([]string, 0, len(list))
	for _, n := range list {
		out = append(out, strVal(n))
	}
	return out
}

func lastName(list []*pg.Node) string {
	if len(list) == 0 {
		return ""
	}
	return strVal(list[len(list)-1])
}

// columnName is the last field of a ColumnRef ("o.created_at" →
// "created_at"), or "".
func columnName(n *pg.Node) string {
	cr := n.GetColumnRef()
	if cr == nil || len(cr.Fields) == 0 {
		return ""
	}
	return strVal(cr.Fields[len(cr.Fields)-1])
}

// stripCasts removes TypeCast and COLLATE wrappers.
func stripCasts(n *pg.Node) *pg.Node {
	for n != nil {
		switch {
		case n.GetTypeCast() != nil:
			n = n.GetTypeCast().Arg
		case n.GetCollateClause() != nil:
			n = n.GetCollateClause().Arg
		default:
			return n
		}
	}
	return nil
}

// intConst reports the value of an integer-like constant (42, '42', 42.0,
// 42::int).
func intConst(n *pg.Node) (int64, bool) {
	n = stripCasts(n)
	c := n.GetAConst()
	if c == nil || c.Isnull {
		return 0, false
	}
	switch {
	case c.GetIval() != nil:
		return int64(c.GetIval().Ival), true
	case c.GetSval() != nil:
		return parseIntText(c.GetSval().Sval)
	case c.GetFval() != nil:
		return parseIntText(c.GetFval().Fval)
	}
	return 0, false
}

func parseIntText(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '.'); i >= 0 && strings.Trim(s[i+1:], "0") == "" {
		s = s[:i]
	}
	if s == "" || len(s) > 18 {
		return 0, false
	}
	neg := false
	if s[0] == '-' || s[0] == '+' {
		neg = s[0] == '-'
		s = s[1:]
	}
	if s == "" {
		return 0, false
	}
	var v int64
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, false
		}
		v = v*10 + int64(r-'0')
	}
	if neg {
		v = -v
	}
	return v, true
}

func isNullConst(n *pg.Node) bool {
	c := stripCasts(n).GetAConst()
	return c != nil && c.Isnull
}

// tableName is a configured table, optionally schema-qualified.
type tableName struct{ schema, name string }

func parseTableName(s string) tableName {
	if i := strings.LastIndexByte(s, '.'); i >= 0 {
		return tableName{schema: s[:i], name: s[i+1:]}
	}
	return tableName{name: s}
}

func (t tableName) String() string {
	if t.schema != "" {
		return t.schema + "." + t.name
	}
	return t.name
}

func (t tableName) matchParts(schema, name string) bool {
	return name == t.name && (t.schema == "" || schema == "" || schema == t.schema)
}

func (t tableName) matches(rv *pg.RangeVar) bool {
	return rv != nil && t.matchParts(rv.Schemaname, rv.Relname)
}

// matchesList matches a qualified name list [schema.]table.
func (t tableName) matchesList(parts []string) bool {
	switch len(parts) {
	case 1:
		return t.matchParts("", parts[0])
	case 2:
		return t.matchParts(parts[0], parts[1])
	case 3: // catalog.schema.table
		return t.matchParts(parts[1], parts[2])
	}
	return false
}

func rvName(rv *pg.RangeVar) string {
	if rv.GetSchemaname() != "" {
		return rv.Schemaname + "." + rv.Relname
	}
	return rv.GetRelname()
}

// mentions reports whether a RangeVar for t appears anywhere under m.
func mentions(m proto.Message, t tableName) bool {
	found := false
	walk(m, func(x proto.Message) bool {
		if found {
			return false
		}
		if rv, ok := x.(*pg.RangeVar); ok && t.matches(rv) {
			found = true
		}
		return !found
	})
	return found
}

// opName is the operator of an expression ("<", "=", …).
func opName(e *pg.A_Expr) string { return lastName(e.Name) }

// valuesAt lists the expressions an INSERT source puts in column idx.
func valuesAt(n *pg.Node, idx int) []*pg.Node {
	sel := n.GetSelectStmt()
	if sel == nil {
		return nil
	}
	if sel.Op != pg.SetOperation_SETOP_NONE {
		return append(valuesAt(&pg.Node{Node: &pg.Node_SelectStmt{SelectStmt: sel.Larg}}, idx),
			valuesAt(&pg.Node{Node: &pg.Node_SelectStmt{SelectStmt: sel.Rarg}}, idx)...)
	}
	var out []*pg.Node
	for _, row := range sel.ValuesLists {
		items := row.GetList().GetItems()
		if idx < len(items) {
			out = append(out, items[idx])
		}
	}
	if len(sel.ValuesLists) == 0 && idx < len(sel.TargetList) {
		out = append(out, sel.TargetList[idx].GetResTarget().GetVal())
	}
	return out
}
