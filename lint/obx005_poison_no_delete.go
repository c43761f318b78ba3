package lint

import (
	pg "github.com/pganalyze/pg_query_go/v6"
)

// RulePoisonNoDelete is OBX005 poison-no-delete.
const RulePoisonNoDelete = "OBX005"

func init() {
	register(Rule{
		ID: RulePoisonNoDelete, Name: "poison-no-delete",
		Summary: "rows of the poison table are never deleted or truncated, and its no-delete trigger is never dropped or disabled",
		Fix:     "keep quarantined rows; replay them (walpost poison replay) and let replayed_at/replay_count record it",
	}, (*analysis).checkPoisonNoDelete)
}

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
