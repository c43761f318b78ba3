package lint

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// Rule describes one check. ID and Name are stable: configuration and
// --disable refer to them.
type Rule struct {
	ID      string // OBX001…
	Name    string // kebab-case short name
	Summary string // one line: what the rule catches
	Fix     string // the generic fix, also attached to every finding
}

// ruleDef is a rule and the check that implements it.
type ruleDef struct {
	Rule
	check func(*analysis) []Finding
}

// rules lists every rule in id order. Each rule lives in a file of its own
// (obx001_outbox_unique_key.go, …) that declares its id constant, registers
// its metadata and check from init, and holds the check's helpers. A new
// rule is such a file, its bad and good files under testdata/ and its
// section in docs/lint.md (TestRuleTable also counts the rules).
var rules []ruleDef

// register adds a rule to rules, keeping id order; an id or name used twice
// is a programming error.
func register(r Rule, check func(*analysis) []Finding) {
	i, found := slices.BinarySearchFunc(rules, r.ID, func(d ruleDef, id string) int { return strings.Compare(d.ID, id) })
	if found || slices.ContainsFunc(rules, func(d ruleDef) bool { return d.Name == r.Name }) {
		panic("lint: rule registered twice: " + r.ID + " " + r.Name)
	}
	rules = slices.Insert(rules, i, ruleDef{Rule: r, check: check})
}

// Rules returns every rule, in id order.
func Rules() []Rule {
	out := make([]Rule, len(rules))
	for i, r := range rules {
		out[i] = r.Rule
	}
	return out
}

func ruleByID(id string) Rule {
	for _, r := range rules {
		if r.ID == id {
			return r.Rule
		}
	}
	panic("lint: unknown rule " + id)
}

// LookupRule finds a rule by id or name, case-insensitively.
func LookupRule(s string) (Rule, bool) {
	s = strings.TrimSpace(s)
	for _, r := range rules {
		if strings.EqualFold(r.ID, s) || strings.EqualFold(r.Name, s) {
			return r.Rule, true
		}
	}
	return Rule{}, false
}

// ErrUnknownRule is wrapped by Lint and Run when Options.Disable names no rule.
var ErrUnknownRule = errors.New("unknown lint rule")

// run applies every enabled rule to the parsed file set, in id order.
func (a *analysis) run() []Finding {
	a.collectSchema()
	var out []Finding
	for _, r := range rules {
		if a.cfg.enabled[r.ID] {
			out = append(out, r.check(a)...)
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

// isReplay: the INSERT's own query reads the poison table.
func (a *analysis) isReplay(ins *pg.InsertStmt) bool {
	return mentions(ins.SelectStmt, a.cfg.poison) || mentions(ins.WithClause, a.cfg.poison)
}
