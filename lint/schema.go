package lint

import (
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// schema is what the file set declares about the outbox and poison tables;
// rules consult it so that a constraint added by a later migration, or a
// trigger defined in another file, counts.
type schema struct {
	// columns of the outbox table by name, from CREATE TABLE and ADD COLUMN
	cols map[string]*column
	// order of the columns of the first CREATE TABLE outbox, for INSERTs
	// without a column list
	order []string

	key        string // the idempotency key column (Options.KeyColumn)
	keyUnique  bool   // UNIQUE / PRIMARY KEY on the key column alone, anywhere
	keyNotNull bool   // NOT NULL / PRIMARY KEY on the key column, anywhere

	// triggers on the poison table: name → event mask (TRIGGER_TYPE_*)
	triggers map[string]int32
}

type column struct {
	sequence   bool   // serial, identity or DEFAULT nextval(): a delivery order
	randomUUID bool   // DEFAULT gen_random_uuid() or alike: no order at all
	generator  string // a DEFAULT that generates a fresh value, e.g. "gen_random_uuid()"
}

// Trigger event bits of CreateTrigStmt.Events (PostgreSQL's TRIGGER_TYPE_*).
const (
	triggerDelete   = 1 << 3
	triggerTruncate = 1 << 5
)

func (a *analysis) collectSchema() {
	sc := &schema{key: a.cfg.key, cols: map[string]*column{}, triggers: map[string]int32{}}
	a.schema = sc
	for _, f := range a.files {
		for _, s := range f.stmts {
			for _, n := range s.nodes {
				switch x := n.(type) {
				case *pg.CreateStmt:
					if !a.cfg.outbox.matches(x.Relation) {
						continue
					}
					first := len(sc.order) == 0
					for _, e := range x.TableElts {
						if cd := e.GetColumnDef(); cd != nil {
							sc.addColumn(cd)
							if first {
								sc.order = append(sc.order, cd.Colname)
							}
						}
						if c := e.GetConstraint(); c != nil {
							sc.addConstraint(c)
						}
					}
				case *pg.AlterTableStmt:
					if !a.cfg.outbox.matches(x.Relation) {
						continue
					}
					for _, cn := range x.Cmds {
						cmd := cn.GetAlterTableCmd()
						switch cmd.GetSubtype() {
						case pg.AlterTableType_AT_AddColumn:
							if cd := cmd.Def.GetColumnDef(); cd != nil {
								sc.addColumn(cd)
							}
						case pg.AlterTableType_AT_AddConstraint:
							if c := cmd.Def.GetConstraint(); c != nil {
								sc.addConstraint(c)
							}
						case pg.AlterTableType_AT_SetNotNull:
							if cmd.Name == sc.key {
								sc.keyNotNull = true
							}
						}
					}
				case *pg.IndexStmt:
					if x.Unique && x.WhereClause == nil && a.cfg.outbox.matches(x.Relation) &&
						len(x.IndexParams) == 1 && x.IndexParams[0].GetIndexElem().GetName() == sc.key {
						sc.keyUnique = true
					}
				case *pg.CreateTrigStmt:
					if a.cfg.poison.matches(x.Relation) {
						sc.triggers[x.Trigname] |= x.Events
					}
				}
			}
		}
	}
}

func (sc *schema) addColumn(cd *pg.ColumnDef) {
	col := sc.cols[cd.Colname]
	if col == nil {
		col = &column{}
		sc.cols[cd.Colname] = col
	}
	switch strings.ToLower(lastName(cd.GetTypeName().GetNames())) {
	case "serial", "bigserial", "smallserial", "serial2", "serial4", "serial8":
		col.sequence = true
	}
	if cd.Identity != "" {
		col.sequence = true
	}
	defaults := []*pg.Node{cd.RawDefault}
	for _, cn := range cd.Constraints {
		c := cn.GetConstraint()
		switch c.GetContype() {
		case pg.ConstrType_CONSTR_IDENTITY:
			col.sequence = true
		case pg.ConstrType_CONSTR_DEFAULT:
			defaults = append(defaults, c.RawExpr)
		case pg.ConstrType_CONSTR_NOTNULL:
			if cd.Colname == sc.key {
				sc.keyNotNull = true
			}
		case pg.ConstrType_CONSTR_UNIQUE:
			if cd.Colname == sc.key {
				sc.keyUnique = true
			}
		case pg.ConstrType_CONSTR_PRIMARY:
			if cd.Colname == sc.key {
				sc.keyUnique, sc.keyNotNull = true, true
			}
		}
	}
	if cd.IsNotNull && cd.Colname == sc.key {
		sc.keyNotNull = true
	}
	for _, d := range defaults {
		fc := stripCasts(d).GetFuncCall()
		if fc == nil {
			if d != nil && generatorIn(d) != "" {
				col.generator = generatorIn(d)
			}
			continue
		}
		switch name := strings.ToLower(lastName(fc.Funcname)); name {
		case "nextval":
			col.sequence = true
		case "gen_random_uuid", "uuid_generate_v4", "uuidv4":
			col.randomUUID = true
		}
		if g := generatorIn(d); g != "" {
			col.generator = g
		}
	}
}

func (sc *schema) addConstraint(c *pg.Constraint) {
	if len(c.Keys) != 1 || strVal(c.Keys[0]) != sc.key {
		return
	}
	switch c.Contype {
	case pg.ConstrType_CONSTR_UNIQUE:
		sc.keyUnique = true
	case pg.ConstrType_CONSTR_PRIMARY:
		sc.keyUnique, sc.keyNotNull = true, true
	}
}
