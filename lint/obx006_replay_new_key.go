package lint

import (
	"slices"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// RuleReplayNewKey is OBX006 replay-new-key.
const RuleReplayNewKey = "OBX006"

func init() {
	register(Rule{
		ID: RuleReplayNewKey, Name: "replay-new-key",
		Summary: "a replay from the poison table must re-insert the original idempotency_key, not a newly generated one",
		Fix:     "insert the poison row's own idempotency_key (with ON CONFLICT (idempotency_key) DO NOTHING if the row may still be there)",
	}, (*analysis).checkReplayNewKey)
}

// generators are functions whose every call yields a new value.
var generators = map[string]bool{
	"gen_random_uuid": true, "uuid_generate_v1": true, "uuid_generate_v1mc": true, "uuid_generate_v4": true,
	"uuidv4": true, "uuidv7": true, "gen_random_bytes": true, "random": true, "random_normal": true,
	"clock_timestamp": true, "statement_timestamp": true, "transaction_timestamp": true, "now": true,
	"timeofday": true, "nextval": true, "txid_current": true, "pg_current_xact_id": true,
}

// keyGenerator names the generator a value put in the key column comes
// from: one used in the value, or the column's DEFAULT when the value is
// DEFAULT (keyCol may be nil: unknown column); "" when none.
func keyGenerator(v *pg.Node, keyCol *column) string {
	if g := generatorIn(v); g != "" {
		return g
	}
	if stripCasts(v).GetSetToDefault() != nil && keyCol != nil {
		return keyCol.generator
	}
	return ""
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
					if c.GetResTarget().GetName() == a.cfg.key {
						idx = i
					}
				}
			} else {
				idx = slices.Index(a.schema.order, a.cfg.key)
				if idx < 0 {
					continue // no column list and no known column order: cannot tell
				}
			}
			keyCol := a.schema.cols[a.cfg.key]
			if idx < 0 {
				if ins.SelectStmt != nil && keyCol != nil && keyCol.generator != "" {
					out = append(out, a.finding(RuleReplayNewKey, s, off,
						"replay from %s into %s leaves out %s, so its DEFAULT %s generates a new key: consumers see the replayed event as a new one and process it twice",
						poison, rvName(ins.Relation), a.cfg.key, keyCol.generator))
				}
				continue
			}
			for _, v := range valuesAt(ins.SelectStmt, idx) {
				g := keyGenerator(v, keyCol)
				if g == "" {
					continue
				}
				out = append(out, a.finding(RuleReplayNewKey, s, s.at(firstLocation(v)),
					"replay from %s into %s puts a newly generated key (%s) in %s instead of the original one: consumers see the replayed event as a new one and process it twice",
					poison, rvName(ins.Relation), g, a.cfg.key))
			}
		}
	})
	return out
}
