package lint

import (
	"slices"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// RuleInboxState is OBX010 inbox-state.
const RuleInboxState = "OBX010"

func init() {
	register(Rule{
		ID: RuleInboxState, Name: "inbox-state",
		Summary: "the inbox's tables (package inbox) are changed only by the inbox: no watermark row deleted or moved by hand, no key row deleted except by age (retention) or with its whole consumer group",
		Fix:     "let inbox.Prune (Config.KeepFor) delete key rows; to read a partition again set inbox_watermark.next_offset = -1; delete a group's rows of both tables only when the group is retired",
	}, (*analysis).checkInboxState)
}

// The inbox's tables: unqualified, created in the first schema of the
// consumer's search_path, so matched in any schema.
var (
	inboxWatermark = tableName{name: "inbox_watermark"}
	inboxKey       = tableName{name: "inbox_key"}
)

// checkInboxState reports what makes an inbox apply an event twice: the
// watermark rows (a partition's last applied commit LSN and its keys) are
// the memory of everything applied from walpost's first sends, and the key
// rows that of every replayed, recovered or headerless record. Deleting a
// watermark row of a live group, or moving its commit_lsn or keys, makes
// the partition's applied records look new; deleting key rows other than
// by age (the retention rule of docs/inbox.md) makes a re-delivery of
// theirs look new. Setting next_offset (re-reading a partition) is safe:
// the watermark still skips what was applied.
func (a *analysis) checkInboxState() []Finding {
	var out []Finding
	a.allStmts(func(s *stmt) {
		for _, n := range s.nodes {
			switch x := n.(type) {
			case *pg.TruncateStmt:
				for _, r := range x.Relations {
					if rv := r.GetRangeVar(); inboxWatermark.matches(rv) || inboxKey.matches(rv) {
						out = append(out, a.finding(RuleInboxState, s, s.posOf(x, rv.Location),
							"TRUNCATE %s erases every consumer group's record of applied events: each one delivered again is applied twice", rvName(rv)))
					}
				}
			case *pg.DeleteStmt:
				switch {
				case inboxWatermark.matches(x.Relation):
					cols := columnsOf(x.WhereClause, watermarkColumns)
					if x.WhereClause == nil || !slices.Equal(cols, []string{"consumer_group"}) {
						out = append(out, a.finding(RuleInboxState, s, s.posOf(x, x.Relation.Location),
							"DELETE FROM %s %s: the partitions whose rows go apply their events again when they are delivered again",
							rvName(x.Relation), whereSays(x.WhereClause, cols, "a whole consumer group")))
					}
				case inboxKey.matches(x.Relation):
					cols := columnsOf(x.WhereClause, keyColumns)
					if x.WhereClause == nil || !(slices.Contains(cols, "applied_at") || slices.Equal(cols, []string{"consumer_group"})) {
						out = append(out, a.finding(RuleInboxState, s, s.posOf(x, x.Relation.Location),
							"DELETE FROM %s %s: a replayed, recovered or headerless event whose key row goes is applied again when it is delivered again",
							rvName(x.Relation), whereSays(x.WhereClause, cols, "age (applied_at) or a whole consumer group")))
					}
				}
			case *pg.UpdateStmt:
				if !inboxWatermark.matches(x.Relation) {
					continue
				}
				for _, t := range x.TargetList {
					rt := t.GetResTarget()
					if name := rt.GetName(); name == "commit_lsn" || name == "keys" || name == "consumer_group" || name == "topic" || name == "partition" {
						out = append(out, a.finding(RuleInboxState, s, s.posOf(x, x.Relation.Location),
							"UPDATE %s SET %s moves a watermark by hand: the events it stops covering are applied again when delivered again (next_offset alone may be set)",
							rvName(x.Relation), name))
						break
					}
				}
			}
		}
	})
	return out
}

// The tables' columns (inbox/schema.sql): what a WHERE names of them, not
// a function's variables or parameters.
var (
	watermarkColumns = []string{"consumer_group", "topic", "partition", "commit_lsn", "keys", "next_offset", "updated_at"}
	keyColumns       = []string{"consumer_group", "topic", "idempotency_key", "applied_at"}
)

// columnsOf lists the distinct columns of table an expression names,
// sorted.
func columnsOf(n *pg.Node, table []string) []string {
	var cols []string
	walk(n, func(m proto.Message) bool {
		if cr, ok := m.(*pg.ColumnRef); ok && len(cr.Fields) > 0 {
			if c := strVal(cr.Fields[len(cr.Fields)-1]); slices.Contains(table, c) && !slices.Contains(cols, c) {
				cols = append(cols, c)
			}
		}
		return true
	})
	slices.Sort(cols)
	return cols
}

func whereSays(where *pg.Node, cols []string, allowed string) string {
	if where == nil {
		return "without WHERE deletes every group's rows"
	}
	if len(cols) == 0 {
		return "selects rows by no column, not by " + allowed
	}
	return "selects rows by " + strings.Join(cols, ", ") + ", not by " + allowed
}
