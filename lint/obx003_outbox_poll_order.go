package lint

import (
	pg "github.com/pganalyze/pg_query_go/v6"
)

// RuleOutboxPollOrder is OBX003 outbox-poll-order.
const RuleOutboxPollOrder = "OBX003"

func init() {
	register(Rule{
		ID: RuleOutboxPollOrder, Name: "outbox-poll-order",
		Summary: "a poller that reads the outbox with LIMIT or FOR UPDATE SKIP LOCKED must ORDER BY created_at (or the id/sequence)",
		Fix:     "add ORDER BY created_at (or the sequence/id column), ascending, before LIMIT / FOR UPDATE SKIP LOCKED",
	}, (*analysis).checkPollOrder)
}

// orderNames are column names taken as a delivery order unless the file
// set declares them as random UUIDs.
var orderNames = map[string]bool{"id": true, "seq": true, "sequence": true, "sequence_number": true, "seq_no": true, "position": true, "event_id": true}

func (a *analysis) isOrderColumn(name string) bool {
	if name == "created_at" {
		return true
	}
	col := a.schema.cols[name]
	if col != nil && col.sequence {
		return true
	}
	return orderNames[name] && (col == nil || !col.randomUUID)
}

func fromTable(items []*pg.Node, t tableName) *pg.RangeVar {
	for _, it := range items {
		if rv := it.GetRangeVar(); rv != nil && t.matches(rv) {
			return rv
		}
		if j := it.GetJoinExpr(); j != nil {
			if rv := fromTable([]*pg.Node{j.Larg, j.Rarg}, t); rv != nil {
				return rv
			}
		}
	}
	return nil
}

func conjuncts(n *pg.Node) []*pg.Node {
	if b := n.GetBoolExpr(); b != nil && b.Boolop == pg.BoolExprType_AND_EXPR {
		var out []*pg.Node
		for _, arg := range b.Args {
			out = append(out, conjuncts(arg)...)
		}
		return out
	}
	if n == nil {
		return nil
	}
	return []*pg.Node{n}
}

// singleRow: the WHERE clause pins one row by the key column or id, so
// order cannot matter.
func singleRow(where *pg.Node, key string) bool {
	for _, c := range conjuncts(where) {
		e := c.GetAExpr()
		if e == nil || e.Kind != pg.A_Expr_Kind_AEXPR_OP || opName(e) != "=" {
			continue
		}
		for _, side := range []*pg.Node{e.Lexpr, e.Rexpr} {
			if n := columnName(stripCasts(side)); n == key || n == "id" {
				return true
			}
		}
	}
	return false
}

// alreadySent: the query only reads rows with sent_at IS NOT NULL (pruning).
func alreadySent(where *pg.Node) bool {
	for _, c := range conjuncts(where) {
		if nt := c.GetNullTest(); nt != nil && nt.Nulltesttype == pg.NullTestType_IS_NOT_NULL && columnName(nt.Arg) == "sent_at" {
			return true
		}
	}
	return false
}

func (a *analysis) checkPollOrder() []Finding {
	var out []Finding
	a.allStmts(func(s *stmt) {
		for _, n := range s.nodes {
			sel, ok := n.(*pg.SelectStmt)
			if !ok {
				continue
			}
			rv := fromTable(sel.FromClause, a.cfg.outbox)
			if rv == nil {
				continue
			}
			limit := sel.LimitCount != nil && !isNullConst(sel.LimitCount)
			skipLocked := false
			for _, lc := range sel.LockingClause {
				if lc.GetLockingClause().GetWaitPolicy() == pg.LockWaitPolicy_LockWaitSkip {
					skipLocked = true
				}
			}
			if !limit && !skipLocked {
				continue
			}
			if singleRow(sel.WhereClause, a.cfg.key) || alreadySent(sel.WhereClause) {
				continue
			}
			var what string
			switch {
			case limit && skipLocked:
				what = "LIMIT … FOR UPDATE SKIP LOCKED"
			case limit:
				what = "LIMIT"
			default:
				what = "FOR UPDATE SKIP LOCKED"
			}
			off := s.posOf(sel, rv.Location)
			if len(sel.SortClause) == 0 {
				out = append(out, a.finding(RuleOutboxPollOrder, s, off,
					"%s over %s without ORDER BY: the poller picks rows in no particular order and delivers events out of order",
					what, rvName(rv)))
				continue
			}
			sb := sel.SortClause[0].GetSortBy()
			key := stripCasts(sb.GetNode())
			if k, ok := intConst(key); ok && k >= 1 && int(k) <= len(sel.TargetList) { // ORDER BY 1
				key = stripCasts(sel.TargetList[k-1].GetResTarget().GetVal())
			}
			name := columnName(key)
			switch {
			case name == "" || !a.isOrderColumn(name):
				desc := "an expression"
				if name != "" {
					desc = name
				}
				if col := a.schema.cols[name]; col != nil && col.randomUUID {
					desc = name + " (a random UUID)"
				}
				out = append(out, a.finding(RuleOutboxPollOrder, s, off,
					"%s over %s is ordered first by %s, not by created_at or a sequence: events are delivered out of order",
					what, rvName(rv), desc))
			case sb.SortbyDir == pg.SortByDir_SORTBY_DESC:
				out = append(out, a.finding(RuleOutboxPollOrder, s, off,
					"%s over %s orders by %s DESC: the newest events go first and older ones wait or arrive out of order",
					what, rvName(rv), name))
			}
		}
	})
	return out
}
