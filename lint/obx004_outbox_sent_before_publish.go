package lint

import (
	"regexp"
	"slices"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// RuleSentBeforePublish is OBX004 outbox-sent-before-publish.
const RuleSentBeforePublish = "OBX004"

func init() {
	register(Rule{
		ID: RuleSentBeforePublish, Name: "outbox-sent-before-publish",
		Summary: "UPDATE outbox SET sent_at must come after the publish step, never before it",
		Fix:     "publish first and set sent_at only once the broker acknowledged the record (walpost itself never needs sent_at)",
	}, (*analysis).checkSentBeforePublish)
}

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
