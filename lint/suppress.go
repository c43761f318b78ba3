package lint

import (
	"regexp"
	"strings"
)

// suppressRE is an inline suppression: "-- walpost-lint: ignore RULE[,RULE]
// reason". It silences the named rules (id or name) on its own line (a
// trailing comment) and on the next line (a comment on a line of its
// own).
var suppressRE = regexp.MustCompile(`--\s*walpost-lint:\s*ignore\b\s*([^\s]*)\s*(.*)$`)

// suppression is one parsed suppression comment.
type suppression struct {
	line  int             // 1-based
	rules map[string]bool // rule ids
}

// suppressions parses the suppression comments of src; a comment that
// names no known rule or gives no reason is an Error (a silenced finding
// must say why, and a typo must not silence nothing quietly).
func suppressions(name string, src []byte) ([]suppression, []Error) {
	var out []suppression
	var errs []Error
	for i, line := range strings.Split(string(src), "\n") {
		m := suppressRE.FindStringSubmatchIndex(line)
		if m == nil {
			continue
		}
		list, reason := line[m[2]:m[3]], strings.TrimSpace(line[m[4]:m[5]])
		col := len([]rune(line[:m[0]])) + 1
		sup := suppression{line: i + 1, rules: map[string]bool{}}
		for _, part := range strings.Split(list, ",") {
			r, ok := LookupRule(part)
			if !ok {
				errs = append(errs, Error{File: name, Line: i + 1, Column: col,
					Message: "walpost-lint: ignore names no rule " + quoteOrEmpty(part) + ": write -- walpost-lint: ignore OBX003 the reason (an id or a name; several with commas)"})
				continue
			}
			sup.rules[r.ID] = true
		}
		if reason == "" {
			errs = append(errs, Error{File: name, Line: i + 1, Column: col,
				Message: "walpost-lint: ignore " + list + " gives no reason: write why the finding does not apply after the rule, e.g. -- walpost-lint: ignore OBX003 single-row lookup"})
			continue
		}
		out = append(out, sup)
	}
	return out, errs
}

func quoteOrEmpty(s string) string {
	if s == "" {
		return "(none given)"
	}
	return `"` + s + `"`
}

// suppress drops the findings an inline suppression of their file
// silences, and returns the suppression comments' errors.
func suppress(files []File, findings []Finding) ([]Finding, []Error) {
	byFile := map[string][]suppression{}
	var errs []Error
	for _, f := range files {
		s, e := suppressions(f.Name, f.Src)
		byFile[f.Name] = s
		errs = append(errs, e...)
	}
	out := findings[:0]
next:
	for _, fd := range findings {
		for _, s := range byFile[fd.File] {
			if s.rules[fd.Rule] && (s.line == fd.Line || s.line == fd.Line-1) {
				continue next
			}
		}
		out = append(out, fd)
	}
	return out, errs
}
