package lint

import (
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// RulePublicationScope is OBX008 publication-scope.
const RulePublicationScope = "OBX008"

func init() {
	register(Rule{
		ID: RulePublicationScope, Name: "publication-scope",
		Summary: "the outbox publication publishes inserts only and names its tables (no FOR ALL TABLES / TABLES IN SCHEMA)",
		Fix:     "CREATE PUBLICATION … FOR TABLE outbox WITH (publish = 'insert')",
	}, (*analysis).checkPublicationScope)
}

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
