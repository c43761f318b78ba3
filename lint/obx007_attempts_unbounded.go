package lint

import (
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// RuleAttemptsUnbounded is OBX007 attempts-unbounded.
const RuleAttemptsUnbounded = "OBX007"

func init() {
	register(Rule{
		ID: RuleAttemptsUnbounded, Name: "attempts-unbounded",
		Summary: "a retry loop that increments attempts needs a bound (attempts compared against a maximum), and max_attempts must not be 0",
		Fix:     "stop retrying at a bound (e.g. WHERE attempts < 5) and quarantine the row in the poison table; max_attempts ≥ 1",
	}, (*analysis).checkAttemptsUnbounded)
}

var counterNames = map[string]bool{
	"attempts": true, "attempt": true, "attempt_count": true, "attempts_count": true,
	"num_attempts": true, "n_attempts": true, "retry_count": true, "retries": true,
}

// isCounter: a retry counter (attempts, v_attempts, NEW.attempts, …).
func isCounter(name string) bool {
	n := strings.ToLower(name)
	if i := strings.LastIndexByte(n, '.'); i >= 0 {
		n = n[i+1:]
	}
	for _, p := range []string{"v_", "p_", "l_", "_"} {
		n = strings.TrimPrefix(n, p)
	}
	return counterNames[n]
}

// isMaxAttempts: a bound on the counter (max_attempts, max_retries, …).
func isMaxAttempts(name string) bool {
	n := strings.ToLower(name)
	return strings.Contains(n, "max") && (strings.Contains(n, "attempt") || strings.Contains(n, "retr"))
}

func mentionsCounter(n *pg.Node) bool {
	found := false
	walk(n, func(m proto.Message) bool {
		if cr, ok := m.(*pg.ColumnRef); ok && len(cr.Fields) > 0 && isCounter(strVal(cr.Fields[len(cr.Fields)-1])) {
			found = true
		}
		return !found
	})
	return found
}

func nonPositiveConst(n *pg.Node) bool {
	v, ok := intConst(n)
	return ok && v <= 0
}

// isBound: a comparison of the counter against something else than a
// constant ≤ 0 (attempts < 5, attempts >= max_attempts, … BETWEEN 1 AND 5).
func isBound(e *pg.A_Expr) bool {
	switch e.Kind {
	case pg.A_Expr_Kind_AEXPR_OP:
		switch opName(e) {
		case "<", "<=", ">", ">=", "=":
		default:
			return false
		}
		l, r := e.Lexpr, e.Rexpr
		return (mentionsCounter(l) && !mentionsCounter(r) && !nonPositiveConst(r)) ||
			(mentionsCounter(r) && !mentionsCounter(l) && !nonPositiveConst(l))
	case pg.A_Expr_Kind_AEXPR_BETWEEN, pg.A_Expr_Kind_AEXPR_NOT_BETWEEN,
		pg.A_Expr_Kind_AEXPR_BETWEEN_SYM, pg.A_Expr_Kind_AEXPR_NOT_BETWEEN_SYM:
		items := e.Rexpr.GetList().GetItems()
		return mentionsCounter(e.Lexpr) && len(items) == 2 && !nonPositiveConst(items[1])
	}
	return false
}

func (a *analysis) checkAttemptsUnbounded() []Finding {
	type site struct {
		s    *stmt
		off  int
		name string
	}
	var increments, zeros []site
	bounded := false
	a.allStmts(func(s *stmt) {
		if s.assign != "" { // PL/pgSQL: x := expr, or DECLARE x int := expr
			if sel, ok := s.node.(*pg.SelectStmt); ok && len(sel.TargetList) == 1 {
				v := sel.TargetList[0].GetResTarget().GetVal()
				switch {
				case isCounter(s.assign) && mentionsCounter(v):
					increments = append(increments, site{s, s.pos, s.assign})
				case isMaxAttempts(s.assign) && isZero(v):
					zeros = append(zeros, site{s, s.pos, s.assign})
				}
			}
		}
		setList := func(targets []*pg.Node) {
			for _, t := range targets {
				rt := t.GetResTarget()
				switch {
				case rt == nil:
				case isCounter(rt.Name) && mentionsCounter(rt.Val):
					increments = append(increments, site{s, s.at(rt.Location), rt.Name})
				case isMaxAttempts(rt.Name) && isZero(rt.Val):
					zeros = append(zeros, site{s, s.at(rt.Location), rt.Name})
				}
			}
		}
		for _, n := range s.nodes {
			switch x := n.(type) {
			case *pg.A_Expr:
				if isBound(x) {
					bounded = true
				}
			case *pg.UpdateStmt:
				setList(x.TargetList)
			case *pg.OnConflictClause:
				setList(x.TargetList)
			case *pg.MergeWhenClause:
				setList(x.TargetList)
			case *pg.InsertStmt:
				for i, c := range x.Cols {
					if name := c.GetResTarget().GetName(); isMaxAttempts(name) {
						for _, v := range valuesAt(x.SelectStmt, i) {
							if isZero(v) {
								zeros = append(zeros, site{s, s.at(firstLocation(v)), name})
							}
						}
					}
				}
			case *pg.ColumnDef:
				if !isMaxAttempts(x.Colname) {
					continue
				}
				defs := []*pg.Node{x.RawDefault}
				for _, cn := range x.Constraints {
					if c := cn.GetConstraint(); c.GetContype() == pg.ConstrType_CONSTR_DEFAULT {
						defs = append(defs, c.RawExpr)
					}
				}
				for _, d := range defs {
					if isZero(d) {
						zeros = append(zeros, site{s, s.at(x.Location), x.Colname})
					}
				}
			case *pg.FunctionParameter:
				if isMaxAttempts(x.Name) && isZero(x.Defexpr) {
					zeros = append(zeros, site{s, s.pos, x.Name})
				}
			case *pg.VariableSetStmt:
				if isMaxAttempts(x.Name) && len(x.Args) == 1 && isZero(x.Args[0]) {
					zeros = append(zeros, site{s, s.pos, x.Name})
				}
			}
		}
	})
	var out []Finding
	for _, z := range zeros {
		out = append(out, a.finding(RuleAttemptsUnbounded, z.s, z.off,
			"%s is 0, which means no bound: a poison message is retried forever and blocks everything queued behind it", z.name))
	}
	if !bounded {
		for _, inc := range increments {
			out = append(out, a.finding(RuleAttemptsUnbounded, inc.s, inc.off,
				"%s is incremented here but never compared against a maximum anywhere in the linted files: a poison message is retried forever and blocks the queue",
				inc.name))
		}
	}
	return out
}

func isZero(n *pg.Node) bool {
	v, ok := intConst(n)
	return ok && v == 0
}
