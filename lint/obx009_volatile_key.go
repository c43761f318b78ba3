package lint

import (
	"slices"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// RuleVolatileKey is OBX009 volatile-key.
const RuleVolatileKey = "OBX009"

func init() {
	register(Rule{
		ID: RuleVolatileKey, Name: "volatile-key",
		Summary: "an insert into the outbox must not take its idempotency key from a volatile function (gen_random_uuid(), random(), now(), nextval(), …): a caller that retries the insert gets a new key each time",
		Fix:     "derive the key from the business event (e.g. 'order-' || order_id || '-created') or pass it in as a parameter the caller keeps across retries",
	}, (*analysis).checkVolatileKey)
}

// checkVolatileKey reports an INSERT into the outbox whose key column gets
// a value generator, or is left to a DEFAULT that is one. A retried
// request (a client timeout, a message redelivered to the service) then
// inserts the same event under a second key, and consumers deduplicating
// by key process it twice. Replays from the poison table are OBX006's.
func (a *analysis) checkVolatileKey() []Finding {
	var out []Finding
	key := a.cfg.key
	replayBodies := map[int]bool{} // as in checkReplayNewKey
	a.allStmts(func(s *stmt) {
		if s.body != 0 && mentions(s.node, a.cfg.poison) {
			replayBodies[s.body] = true
		}
	})
	a.allStmts(func(s *stmt) {
		for _, n := range s.nodes {
			ins, ok := n.(*pg.InsertStmt)
			if !ok || !a.cfg.outbox.matches(ins.Relation) || a.isReplay(ins) || replayBodies[s.body] {
				continue
			}
			idx := -1
			if len(ins.Cols) > 0 {
				for i, c := range ins.Cols {
					if c.GetResTarget().GetName() == key {
						idx = i
					}
				}
			} else if idx = slices.Index(a.schema.order, key); idx < 0 {
				continue // no column list and no known column order: cannot tell
			}
			keyCol := a.schema.cols[key]
			if idx < 0 {
				if keyCol != nil && keyCol.generator != "" {
					out = append(out, a.finding(RuleVolatileKey, s, s.posOf(ins, ins.Relation.Location),
						"insert into %s leaves out %s, so its DEFAULT %s makes up the key: a retried insert stores the same event under a new key and consumers process it twice",
						rvName(ins.Relation), key, keyCol.generator))
				}
				continue
			}
			for _, v := range valuesAt(ins.SelectStmt, idx) {
				g := keyGenerator(v, keyCol)
				if g == "" {
					continue
				}
				out = append(out, a.finding(RuleVolatileKey, s, s.at(firstLocation(v)),
					"the key %s of this insert into %s comes from %s: a retried insert stores the same event under a new key and consumers process it twice",
					key, rvName(ins.Relation), g))
			}
		}
	})
	return out
}
