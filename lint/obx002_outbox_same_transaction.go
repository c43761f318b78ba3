package lint

import (
	"fmt"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// RuleOutboxSameTransaction is OBX002 outbox-same-transaction.
const RuleOutboxSameTransaction = "OBX002"

func init() {
	register(Rule{
		ID: RuleOutboxSameTransaction, Name: "outbox-same-transaction",
		Summary: "an INSERT INTO outbox must commit in the same transaction as the business write it belongs to",
		Fix:     "put the business write and the INSERT INTO outbox in one BEGIN … COMMIT block",
	}, (*analysis).checkSameTransaction)
}

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
