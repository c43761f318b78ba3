package lint

import (
	pg "github.com/pganalyze/pg_query_go/v6"
)

// RuleOutboxUniqueKey is OBX001 outbox-unique-key.
const RuleOutboxUniqueKey = "OBX001"

func init() {
	register(Rule{
		ID: RuleOutboxUniqueKey, Name: "outbox-unique-key",
		Summary: "the outbox table's idempotency_key must be NOT NULL and UNIQUE (or the primary key)",
		Fix:     "declare idempotency_key text NOT NULL UNIQUE (or add a unique index on idempotency_key alone)",
	}, (*analysis).checkUniqueKey)
}

func (a *analysis) checkUniqueKey() []Finding {
	var out []Finding
	sc := a.schema
	table := a.cfg.outbox.String()
	checkColumn := func(s *stmt, cd *pg.ColumnDef) {
		off := s.at(cd.Location)
		if !sc.keyUnique {
			out = append(out, a.finding(RuleOutboxUniqueKey, s, off,
				"%s.%s has no UNIQUE or PRIMARY KEY constraint: a retried transaction or a replay stores the same event twice and consumers cannot deduplicate",
				table, a.cfg.key))
		}
		if !sc.keyNotNull {
			out = append(out, a.finding(RuleOutboxUniqueKey, s, off,
				"%s.%s is nullable: a row without a key is never deduplicated (UNIQUE lets any number of NULLs through)",
				table, a.cfg.key))
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
					if cd := e.GetColumnDef(); cd != nil && cd.Colname == a.cfg.key {
						key = cd
					}
					if e.GetTableLikeClause() != nil {
						opaque = true
					}
				}
				switch {
				case key != nil:
					checkColumn(s, key)
				case !opaque && sc.cols[a.cfg.key] == nil:
					out = append(out, a.finding(RuleOutboxUniqueKey, s, s.posOf(x, x.Relation.Location),
						"outbox table %s has no %s column: consumers and replays have nothing to deduplicate on",
						table, a.cfg.key))
				}
			case *pg.AlterTableStmt:
				if !a.cfg.outbox.matches(x.Relation) {
					continue
				}
				for _, cn := range x.Cmds {
					cmd := cn.GetAlterTableCmd()
					switch cmd.GetSubtype() {
					case pg.AlterTableType_AT_AddColumn:
						if cd := cmd.Def.GetColumnDef(); cd != nil && cd.Colname == a.cfg.key {
							checkColumn(s, cd)
						}
					case pg.AlterTableType_AT_DropNotNull:
						if cmd.Name == a.cfg.key {
							out = append(out, a.finding(RuleOutboxUniqueKey, s, s.pos,
								"DROP NOT NULL makes %s.%s nullable: rows without a key are never deduplicated",
								table, a.cfg.key))
						}
					}
				}
			}
		}
	})
	return out
}
