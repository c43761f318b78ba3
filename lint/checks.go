package lint

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// run applies every enabled rule to the parsed file set.
func (a *analysis) run() []Finding {
	a.collectSchema()
	checks := []struct {
		id string
		fn func() []Finding
	}{
		{RuleOutboxUniqueKey, a.checkUniqueKey},
		{RuleOutboxSameTransaction, a.checkSameTransaction},
		{RuleOutboxPollOrder, a.checkPollOrder},
		{RuleSentBeforePublish, a.checkSentBeforePublish},
		{RulePoisonNoDelete, a.checkPoisonNoDelete},
		{RuleReplayNewKey, a.checkReplayNewKey},
		{RuleAttemptsUnbounded, a.checkAttemptsUnbounded},
		{RulePublicationScope, a.checkPublicationScope},
	}
	var out []Finding
	for _, c := range checks {
		if a.cfg.enabled[c.id] {
			out = append(out, c.fn()...)
		}
	}
	return out
}

func (a *analysis) finding(rule string, s *stmt, off int, format string, args ...any) Finding {
	r := ruleByID(rule)
	line, col := s.f.lineCol(off)
	return Finding{Rule: r.ID, Name: r.Name, File: s.f.name, Line: line, Column: col,
		Message: fmt.Sprintf(format, args...), Fix: r.Fix}
}

func (a *analysis) allStmts(fn func(*stmt)) {
	for _, f := range a.files {
		for _, s := range f.stmts {
			fn(s)
		}
	}
}

// units groups the statements of the file set by unit, in file position
// order.
func (a *analysis) units() [][]*stmt {
	var order []int
	by := map[int][]*stmt{}
	a.allStmts(func(s *stmt) {
		if _, ok := by[s.unit]; !ok {
			order = append(order, s.unit)
		}
		by[s.unit] = append(by[s.unit], s)
	})
	out := make([][]*stmt, 0, len(order))
	for _, u := range order {
		out = append(out, by[u])
	}
	return out
}

func lineOf(s *stmt, off int) int {
	l, _ := s.f.lineCol(off)
	return l
}

// ---- OBX001 outbox-unique-key ----------------------------------------------

func (a *analysis) checkUniqueKey() []Finding {
	var out []Finding
	sc := a.schema
	table := a.cfg.outbox.String()
	checkColumn := func(s *stmt, cd *pg.ColumnDef) {
		off := s.at(cd.Location)
		if !sc.keyUnique {
			out = append(out, a.finding(RuleOutboxUniqueKey, s, off,
				"%s.%s has no UNIQUE or PRIMARY KEY constraint: a retried transaction or a replay stores the same event twice and consumers cannot deduplicate",
				table, keyColumn))
		}
		if !sc.keyNotNull {
			out = append(out, a.finding(RuleOutboxUniqueKey, s, off,
				"%s.%s is nullable: a row without a key is never deduplicated (UNIQUE lets any number of NULLs through)",
				table, keyColumn))
		}
	}
	a.allStmts(func(s *stmt) {
		for _, n := range s.nodes {
			switch x := n.(type) {
			case *pg.CreateStmt:
				if !a.cfg.outbox.matches(x.Relation) {
					continue
				}
				var key *pg.ColumnDef
				opaque := len(x.InhRelations) > 0 || x.Partbound != nil || x.OfTypename != nil
				for _, e := range x.TableElts {
					if cd := e.GetColumnDef(); cd != nil && cd.Colname == keyColumn {
						key = cd
					}
					if e.GetTableLikeClause() != nil {
						opaque = true
					}
				}
				switch {
				case key != nil:
					checkColumn(s, key)
				case !opaque && sc.cols[keyColumn] == nil:
					out = append(out, a.finding(RuleOutboxUniqueKey, s, s.posOf(x, x.Relation.Location),
						"outbox table %s has no %s column: consumers and replays have nothing to deduplicate on",
						table, keyColumn))
				}
			case *pg.AlterTableStmt:
				if !a.cfg.outbox.matches(x.Relation) {
					continue
				}
				for _, cn := range x.Cmds {
					cmd := cn.GetAlterTableCmd()
					switch cmd.GetSubtype() {
					case pg.AlterTableType_AT_AddColumn:
						if cd := cmd.Def.GetColumnDef(); cd != nil && cd.Colname == keyColumn {
							checkColumn(s, cd)
						}
					case pg.AlterTableType_AT_DropNotNull:
						if cmd.Name == keyColumn {
							out = append(out, a.finding(RuleOutboxUniqueKey, s, s.pos,
								"DROP NOT NULL makes %s.%s nullable: rows without a key are never deduplicated",
								table, keyColumn))
						}
					}
				}
			}
		}
	})
	return out
}

// ---- OBX002 outbox-same-transaction ----------------------------------------

// tableWrite is a write to a table inside a statement.
type tableWrite struct {
	rv *pg.RangeVar
	m  proto.Message // the writing statement node (InsertStmt, …)
}

func (a *analysis) isBusiness(rv *pg.RangeVar) bool {
	if rv == nil || a.cfg.outbox.matches(rv) || a.cfg.poison.matches(rv) {
		return false
	}
	switch strings.ToLower(rv.Schemaname) {
	case "pg_catalog", "information_schema":
		return false
	}
	return !strings.HasPrefix(rv.Relname, "pg_")
}

// writes lists the business writes and the outbox inserts of a statement.
func (a *analysis) writes(s *stmt) (business, outboxInserts []tableWrite) {
	for _, n := range s.nodes {
		var rv *pg.RangeVar
		switch x := n.(type) {
		case *pg.InsertStmt:
			if a.cfg.outbox.matches(x.Relation) {
				outboxInserts = append(outboxInserts, tableWrite{x.Relation, x})
				continue
			}
			rv = x.Relation
		case *pg.UpdateStmt:
			rv = x.Relation
		case *pg.DeleteStmt:
			rv = x.Relation
		case *pg.MergeStmt:
			rv = x.Relation
		case *pg.CopyStmt:
			if x.IsFrom {
				rv = x.Relation
			}
		}
		if a.isBusiness(rv) {
			business = append(business, tableWrite{rv, n})
		}
	}
	return business, outboxInserts
}

// isReplay: the INSERT's own query reads the poison table.
func (a *analysis) isReplay(ins *pg.InsertStmt) bool {
	return mentions(ins.SelectStmt, a.cfg.poison) || mentions(ins.WithClause, a.cfg.poison)
}

func (a *analysis) checkSameTransaction() []Finding {
	var out []Finding
	for _, unit := range a.units() {
		biz := make([][]tableWrite, len(unit))
		ins := make([][]tableWrite, len(unit))
		for i, s := range unit {
			biz[i], ins[i] = a.writes(s)
		}
		for i, s := range unit {
			if len(ins[i]) == 0 || len(biz[i]) > 0 { // a data-modifying CTE is one atomic statement
				continue
			}
			if a.isReplay(ins[i][0].m.(*pg.InsertStmt)) { // a replay has no business write to pair with
				continue
			}
			sameTxn := false
			ref := -1
			for j, t := range unit {
				if j == i || len(biz[j]) == 0 {
					continue
				}
				if t.txn == s.txn {
					sameTxn = true
					break
				}
				if j < i || ref < 0 { // the nearest preceding write, else the first following
					ref = j
				}
			}
			if sameTxn || ref < 0 {
				continue
			}
			w := ins[i][0]
			bw := biz[ref][0]
			bs := unit[ref]
			where := fmt.Sprintf("%s at line %d", rvName(bw.rv), lineOf(bs, bs.posOf(bw.m, bw.rv.Location)))
			off := s.posOf(w.m, w.rv.Location)
			if !s.inBlock {
				out = append(out, a.finding(RuleOutboxSameTransaction, s, off,
					"INSERT INTO %s runs outside an explicit transaction block while the same script writes %s: a dropped connection commits one without the other and the event is lost (or sent for a change that never happened)",
					rvName(w.rv), where))
			} else {
				out = append(out, a.finding(RuleOutboxSameTransaction, s, off,
					"INSERT INTO %s commits in a different transaction than the write to %s: a dropped connection between the two commits loses the event (or sends one for a change that never happened)",
					rvName(w.rv), where))
			}
		}
	}
	return out
}

// ---- OBX003 outbox-poll-order ----------------------------------------------

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

func opName(e *pg.A_Expr) string { return lastName(e.Name) }

// singleRow: the WHERE clause pins one row by idempotency_key or id, so
// order cannot matter.
func singleRow(where *pg.Node) bool {
	for _, c := range conjuncts(where) {
		e := c.GetAExpr()
		if e == nil || e.Kind != pg.A_Expr_Kind_AEXPR_OP || opName(e) != "=" {
			continue
		}
		for _, side := range []*pg.Node{e.Lexpr, e.Rexpr} {
			if n := columnName(stripCasts(side)); n == keyColumn || n == "id" {
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
			if singleRow(sel.WhereClause) || alreadySent(sel.WhereClause) {
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

// ---- OBX004 outbox-sent-before-publish -------------------------------------

// publishCommentRE: a comment whose text starts with "publish" (after an
// optional step label: "2.", "step 2:"), e.g. "-- publish the batch".
var publishCommentRE = regexp.MustCompile(`(?i)^(?:--+|/\*+)\s*(?:(?:step\s*)?\d+\s*[.:)]?\s*[-:]?\s*)?publish(?:es|ing)?\b`)

// publishes reports whether a statement is a publish step: a call to a
// function whose name contains "publish", pg_notify(), or NOTIFY.
func publishes(s *stmt) bool {
	for _, n := range s.nodes {
		switch x := n.(type) {
		case *pg.NotifyStmt:
			return true
		case *pg.FuncCall:
			name := strings.ToLower(lastName(x.Funcname))
			if strings.Contains(name, "publish") || name == "pg_notify" {
				return true
			}
		}
	}
	return false
}

type marker struct {
	pos int
	s   *stmt // nil for a comment
}

func (a *analysis) checkSentBeforePublish() []Finding {
	var out []Finding
	for _, unit := range a.units() {
		var markers []marker
		u := unit[0].unit
		f := unit[0].f
		for _, c := range f.comments {
			if c.unit == u && publishCommentRE.MatchString(c.text) {
				markers = append(markers, marker{pos: c.pos})
			}
		}
		for _, s := range unit {
			if publishes(s) {
				markers = append(markers, marker{pos: s.pos, s: s})
			}
		}
		if len(markers) == 0 {
			continue
		}
		slices.SortStableFunc(markers, func(x, y marker) int { return x.pos - y.pos })
		for _, s := range unit {
			for _, n := range s.nodes {
				up, ok := n.(*pg.UpdateStmt)
				if !ok || !a.cfg.outbox.matches(up.Relation) || !setsSentAt(up) {
					continue
				}
				before, after := false, -1
				for _, m := range markers {
					if m.s == s || (m.s == nil && m.pos >= s.pos && m.pos < s.end) {
						continue // inside the same statement: neither before nor after
					}
					if m.pos < s.pos {
						before = true
					} else if after < 0 {
						after = m.pos
					}
				}
				if before || after < 0 {
					continue
				}
				out = append(out, a.finding(RuleSentBeforePublish, s, s.posOf(up, up.Relation.Location),
					"%s is marked sent (SET sent_at) before the publish step at line %d: a crash or a failed publish in between loses the event, since nothing will send a row already marked sent",
					rvName(up.Relation), lineOf(s, after)))
			}
		}
	}
	return out
}

func setsSentAt(up *pg.UpdateStmt) bool {
	for _, t := range up.TargetList {
		rt := t.GetResTarget()
		if rt.GetName() == "sent_at" && !isNullConst(rt.Val) {
			return true
		}
	}
	return false
}

// ---- OBX005 poison-no-delete -----------------------------------------------

func (a *analysis) guards(trigger string) bool {
	ev, known := a.schema.triggers[trigger]
	return !known || ev&(triggerDelete|triggerTruncate) != 0
}

func (a *analysis) checkPoisonNoDelete() []Finding {
	var out []Finding
	table := a.cfg.poison.String()
	for _, unit := range a.units() {
		for i, s := range unit {
			for _, n := range s.nodes {
				switch x := n.(type) {
				case *pg.DeleteStmt:
					if a.cfg.poison.matches(x.Relation) {
						out = append(out, a.finding(RulePoisonNoDelete, s, s.posOf(x, x.Relation.Location),
							"DELETE FROM %s destroys the only record of quarantined events: they can no longer be replayed or audited", rvName(x.Relation)))
					}
				case *pg.TruncateStmt:
					for _, r := range x.Relations {
						if rv := r.GetRangeVar(); a.cfg.poison.matches(rv) {
							out = append(out, a.finding(RulePoisonNoDelete, s, s.posOf(x, rv.Location),
								"TRUNCATE %s destroys the only record of quarantined events: they can no longer be replayed or audited", rvName(rv)))
						}
					}
				case *pg.MergeStmt:
					if !a.cfg.poison.matches(x.Relation) {
						continue
					}
					for _, w := range x.MergeWhenClauses {
						if w.GetMergeWhenClause().GetCommandType() == pg.CmdType_CMD_DELETE {
							out = append(out, a.finding(RulePoisonNoDelete, s, s.posOf(x, x.Relation.Location),
								"MERGE … THEN DELETE on %s destroys quarantined events", rvName(x.Relation)))
							break
						}
					}
				case *pg.DropStmt:
					if x.RemoveType != pg.ObjectType_OBJECT_TRIGGER {
						continue
					}
					for _, obj := range x.Objects {
						parts := names(obj.GetList().GetItems())
						if len(parts) < 2 {
							continue
						}
						trig, tbl := parts[len(parts)-1], parts[:len(parts)-1]
						if !a.cfg.poison.matchesList(tbl) || !a.guards(trig) || recreated(unit[i+1:], a.cfg.poison, trig) {
							continue
						}
						out = append(out, a.finding(RulePoisonNoDelete, s, s.pos,
							"DROP TRIGGER %s removes the guard that refuses DELETE on %s", trig, table))
					}
				case *pg.AlterTableStmt:
					if !a.cfg.poison.matches(x.Relation) {
						continue
					}
					for _, cn := range x.Cmds {
						cmd := cn.GetAlterTableCmd()
						switch cmd.GetSubtype() {
						case pg.AlterTableType_AT_DisableTrig:
							if a.guards(cmd.Name) {
								out = append(out, a.finding(RulePoisonNoDelete, s, s.pos,
									"DISABLE TRIGGER %s switches off the guard that refuses DELETE on %s", cmd.Name, table))
							}
						case pg.AlterTableType_AT_DisableTrigAll, pg.AlterTableType_AT_DisableTrigUser:
							out = append(out, a.finding(RulePoisonNoDelete, s, s.pos,
								"DISABLE TRIGGER ALL/USER switches off the guard that refuses DELETE on %s", table))
						}
					}
				}
			}
		}
	}
	return out
}

// recreated: a later statement of the unit creates the trigger again (the
// idempotent DROP TRIGGER IF EXISTS + CREATE TRIGGER of a migration) or drops
// the whole table (a down migration).
func recreated(rest []*stmt, t tableName, trigger string) bool {
	for _, s := range rest {
		switch x := s.node.(type) {
		case *pg.CreateTrigStmt:
			if x.Trigname == trigger && t.matches(x.Relation) {
				return true
			}
		case *pg.DropStmt:
			if x.RemoveType != pg.ObjectType_OBJECT_TABLE {
				continue
			}
			for _, obj := range x.Objects {
				if t.matchesList(names(obj.GetList().GetItems())) {
					return true
				}
			}
		}
	}
	return false
}

// ---- OBX006 replay-new-key -------------------------------------------------

// generators are functions whose every call yields a new value.
var generators = map[string]bool{
	"gen_random_uuid": true, "uuid_generate_v1": true, "uuid_generate_v1mc": true, "uuid_generate_v4": true,
	"uuidv4": true, "uuidv7": true, "gen_random_bytes": true, "random": true, "random_normal": true,
	"clock_timestamp": true, "statement_timestamp": true, "transaction_timestamp": true, "now": true,
	"timeofday": true, "nextval": true, "txid_current": true, "pg_current_xact_id": true,
}

// generatorIn names the first value generator used in an expression
// ("gen_random_uuid()"), or "".
func generatorIn(n *pg.Node) string {
	found := ""
	walk(n, func(m proto.Message) bool {
		if found != "" {
			return false
		}
		switch x := m.(type) {
		case *pg.FuncCall:
			if name := strings.ToLower(lastName(x.Funcname)); generators[name] {
				found = name + "()"
			}
		case *pg.SQLValueFunction:
			switch x.Op {
			case pg.SQLValueFunctionOp_SVFOP_CURRENT_TIMESTAMP, pg.SQLValueFunctionOp_SVFOP_CURRENT_TIMESTAMP_N,
				pg.SQLValueFunctionOp_SVFOP_LOCALTIMESTAMP, pg.SQLValueFunctionOp_SVFOP_LOCALTIMESTAMP_N,
				pg.SQLValueFunctionOp_SVFOP_CURRENT_TIME, pg.SQLValueFunctionOp_SVFOP_CURRENT_TIME_N:
				found = "CURRENT_TIMESTAMP"
			}
		}
		return found == ""
	})
	return found
}

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

func (a *analysis) checkReplayNewKey() []Finding {
	var out []Finding
	// bodies that touch the poison table are replay procedures
	replayBodies := map[int]bool{}
	a.allStmts(func(s *stmt) {
		if s.body != 0 && mentions(s.node, a.cfg.poison) {
			replayBodies[s.body] = true
		}
	})
	poison := a.cfg.poison.String()
	a.allStmts(func(s *stmt) {
		for _, n := range s.nodes {
			ins, ok := n.(*pg.InsertStmt)
			if !ok || !a.cfg.outbox.matches(ins.Relation) {
				continue
			}
			if !a.isReplay(ins) && !replayBodies[s.body] {
				continue
			}
			off := s.posOf(ins, ins.Relation.Location)
			idx := -1
			if len(ins.Cols) > 0 {
				for i, c := range ins.Cols {
					if c.GetResTarget().GetName() == keyColumn {
						idx = i
					}
				}
			} else {
				idx = slices.Index(a.schema.order, keyColumn)
				if idx < 0 {
					continue // no column list and no known column order: cannot tell
				}
			}
			keyCol := a.schema.cols[keyColumn]
			if idx < 0 {
				if ins.SelectStmt != nil && keyCol != nil && keyCol.generator != "" {
					out = append(out, a.finding(RuleReplayNewKey, s, off,
						"replay from %s into %s leaves out %s, so its DEFAULT %s generates a new key: consumers see the replayed event as a new one and process it twice",
						poison, rvName(ins.Relation), keyColumn, keyCol.generator))
				}
				continue
			}
			for _, v := range valuesAt(ins.SelectStmt, idx) {
				g := generatorIn(v)
				if g == "" && stripCasts(v).GetSetToDefault() != nil && keyCol != nil {
					g = keyCol.generator
				}
				if g == "" {
					continue
				}
				out = append(out, a.finding(RuleReplayNewKey, s, s.at(firstLocation(v)),
					"replay from %s into %s puts a newly generated key (%s) in %s instead of the original one: consumers see the replayed event as a new one and process it twice",
					poison, rvName(ins.Relation), g, keyColumn))
			}
		}
	})
	return out
}

// ---- OBX007 attempts-unbounded ---------------------------------------------

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

// ---- OBX008 publication-scope ----------------------------------------------

type publication struct {
	outbox bool     // names the outbox table
	scope  string   // "" or what makes it cover more than named tables
	ops    []string // publish option; nil: PostgreSQL's default, all four
}

func (p *publication) problem() string {
	if p.scope != "" {
		return p.scope
	}
	if !p.outbox {
		return ""
	}
	ops := p.ops
	if ops == nil {
		ops = []string{"insert", "update", "delete", "truncate"}
	}
	var extra []string
	for _, op := range ops {
		if op != "insert" && op != "" {
			extra = append(extra, op)
		}
	}
	if len(extra) == 0 {
		return ""
	}
	if p.ops == nil {
		return "publishes " + strings.Join(extra, ", ") + " besides insert (publish defaults to all four)"
	}
	return "publishes " + strings.Join(extra, ", ") + " besides insert"
}

func publishOps(opts []*pg.Node) ([]string, bool) {
	for _, o := range opts {
		d := o.GetDefElem()
		if d.GetDefname() != "publish" {
			continue
		}
		ops := []string{}
		for _, op := range strings.Split(strVal(d.Arg), ",") {
			ops = append(ops, strings.ToLower(strings.TrimSpace(op)))
		}
		return ops, true
	}
	return nil, false
}

func (a *analysis) applyObjects(p *publication, objs []*pg.Node, drop bool) {
	for _, o := range objs {
		spec := o.GetPublicationObjSpec()
		switch spec.GetPubobjtype() {
		case pg.PublicationObjSpecType_PUBLICATIONOBJ_TABLE:
			if a.cfg.outbox.matches(spec.GetPubtable().GetRelation()) {
				p.outbox = !drop
			}
		case pg.PublicationObjSpecType_PUBLICATIONOBJ_TABLES_IN_SCHEMA:
			if !drop && (a.cfg.outbox.schema == "" || a.cfg.outbox.schema == spec.Name) {
				p.scope = "covers every table of schema " + spec.Name + ", not just the outbox"
			}
		case pg.PublicationObjSpecType_PUBLICATIONOBJ_TABLES_IN_CUR_SCHEMA:
			if !drop {
				p.scope = "covers every table of the current schema, not just the outbox"
			}
		}
	}
}

func (a *analysis) checkPublicationScope() []Finding {
	var out []Finding
	pubs := map[string]*publication{}
	a.allStmts(func(s *stmt) {
		for _, n := range s.nodes {
			switch x := n.(type) {
			case *pg.CreatePublicationStmt:
				p := &publication{}
				if x.ForAllTables {
					p.scope = "covers all tables (FOR ALL TABLES): every write of the database is decoded and streamed"
				}
				p.ops, _ = publishOps(x.Options)
				a.applyObjects(p, x.Pubobjects, false)
				pubs[x.Pubname] = p
				if msg := p.problem(); msg != "" {
					out = append(out, a.finding(RulePublicationScope, s, s.pos, "publication %s %s", x.Pubname, msg))
				}
			case *pg.AlterPublicationStmt:
				p, known := pubs[x.Pubname]
				if !known {
					continue // created outside the file set: its tables and options are unknown
				}
				before := p.problem()
				if ops, ok := publishOps(x.Options); ok {
					p.ops = ops
				}
				switch x.Action {
				case pg.AlterPublicationAction_AP_SetObjects:
					if len(x.Pubobjects) > 0 {
						p.outbox, p.scope = false, ""
					}
					a.applyObjects(p, x.Pubobjects, false)
				case pg.AlterPublicationAction_AP_AddObjects:
					a.applyObjects(p, x.Pubobjects, false)
				case pg.AlterPublicationAction_AP_DropObjects:
					a.applyObjects(p, x.Pubobjects, true)
				}
				if msg := p.problem(); msg != "" && msg != before {
					out = append(out, a.finding(RulePublicationScope, s, s.pos, "publication %s %s", x.Pubname, msg))
				}
			}
		}
	})
	return out
}
