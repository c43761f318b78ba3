package lint

import (
	"encoding/json"
	"io"
	"net/url"
	"path/filepath"
)

// Output formats of RunFormat and `walpost lint --format`.
const (
	FormatText  = "text"
	FormatJSON  = "json"
	FormatSARIF = "sarif"
)

// Formats are the output formats, for validation and completion.
var Formats = []string{FormatText, FormatJSON, FormatSARIF}

// SARIF 2.1.0 (OASIS), the subset code-scanning UIs read: the tool and its
// rules, one result per finding with its location, and the files that
// could not be read or parsed as tool execution notifications.
type (
	sarifLog struct {
		Schema  string     `json:"$schema"`
		Version string     `json:"version"`
		Runs    []sarifRun `json:"runs"`
	}
	sarifRun struct {
		Tool        sarifTool         `json:"tool"`
		Results     []sarifResult     `json:"results"`
		Invocations []sarifInvocation `json:"invocations"`
	}
	sarifTool struct {
		Driver sarifDriver `json:"driver"`
	}
	sarifDriver struct {
		Name           string      `json:"name"`
		Version        string      `json:"version,omitempty"`
		InformationURI string      `json:"informationUri"`
		Rules          []sarifRule `json:"rules"`
	}
	sarifRule struct {
		ID                   string        `json:"id"`
		Name                 string        `json:"name"`
		ShortDescription     sarifMessage  `json:"shortDescription"`
		Help                 sarifMessage  `json:"help"`
		HelpURI              string        `json:"helpUri"`
		DefaultConfiguration sarifRuleConf `json:"defaultConfiguration"`
	}
	sarifRuleConf struct {
		Level string `json:"level"`
	}
	sarifMessage struct {
		Text string `json:"text"`
	}
	sarifResult struct {
		RuleID    string          `json:"ruleId"`
		RuleIndex int             `json:"ruleIndex"`
		Level     string          `json:"level"`
		Message   sarifMessage    `json:"message"`
		Locations []sarifLocation `json:"locations"`
	}
	sarifLocation struct {
		PhysicalLocation sarifPhysical `json:"physicalLocation"`
	}
	sarifPhysical struct {
		ArtifactLocation sarifArtifact `json:"artifactLocation"`
		Region           *sarifRegion  `json:"region,omitempty"`
	}
	sarifArtifact struct {
		URI string `json:"uri"`
	}
	sarifRegion struct {
		StartLine   int `json:"startLine"`
		StartColumn int `json:"startColumn"`
	}
	sarifInvocation struct {
		ExecutionSuccessful bool                `json:"executionSuccessful"`
		Notifications       []sarifNotification `json:"toolExecutionNotifications"`
	}
	sarifNotification struct {
		Level     string          `json:"level"`
		Message   sarifMessage    `json:"message"`
		Locations []sarifLocation `json:"locations"`
	}
)

// sarifSchema is the $schema of the log: OASIS's SARIF 2.1.0 schema.
const sarifSchema = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"

// manualURI is the rules' documentation.
const manualURI = "https://github.com/walpost/walpost/blob/main/docs/lint.md"

// WriteSARIF writes r as a SARIF 2.1.0 log: every rule (so a UI can show a
// rule without findings), a result of level "error" per finding with the
// fix in its message, and the unreadable or unparsable files as error
// notifications of an unsuccessful invocation. version is walpost's
// (empty: left out).
func (r Result) WriteSARIF(w io.Writer, version string) error {
	run := sarifRun{
		Tool:        sarifTool{Driver: sarifDriver{Name: "walpost lint", Version: version, InformationURI: manualURI}},
		Results:     make([]sarifResult, 0, len(r.Findings)),
		Invocations: []sarifInvocation{{ExecutionSuccessful: len(r.Errors) == 0, Notifications: make([]sarifNotification, 0, len(r.Errors))}},
	}
	index := map[string]int{}
	for i, rule := range Rules() {
		index[rule.ID] = i
		run.Tool.Driver.Rules = append(run.Tool.Driver.Rules, sarifRule{
			ID: rule.ID, Name: rule.Name,
			ShortDescription:     sarifMessage{rule.Summary},
			Help:                 sarifMessage{"Fix: " + rule.Fix},
			HelpURI:              manualURI + "#" + sarifAnchor(rule),
			DefaultConfiguration: sarifRuleConf{Level: "error"},
		})
	}
	for _, f := range r.Findings {
		run.Results = append(run.Results, sarifResult{
			RuleID: f.Rule, RuleIndex: index[f.Rule], Level: "error",
			Message:   sarifMessage{f.Message + " (fix: " + f.Fix + ")"},
			Locations: []sarifLocation{sarifLocationOf(f.File, f.Line, f.Column)},
		})
	}
	for _, e := range r.Errors {
		run.Invocations[0].Notifications = append(run.Invocations[0].Notifications, sarifNotification{
			Level: "error", Message: sarifMessage{e.Message}, Locations: []sarifLocation{sarifLocationOf(e.File, e.Line, e.Column)},
		})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(sarifLog{Schema: sarifSchema, Version: "2.1.0", Runs: []sarifRun{run}})
}

// sarifLocationOf is a file position; a position-less error (an unreadable
// file) has no region.
func sarifLocationOf(file string, line, col int) sarifLocation {
	loc := sarifLocation{PhysicalLocation: sarifPhysical{ArtifactLocation: sarifArtifact{URI: fileURI(file)}}}
	if line > 0 {
		loc.PhysicalLocation.Region = &sarifRegion{StartLine: line, StartColumn: max(col, 1)}
	}
	return loc
}

// fileURI is a path as a relative URI reference (forward slashes, spaces
// and such escaped), as SARIF's artifactLocation.uri wants it.
func fileURI(p string) string {
	return (&url.URL{Path: filepath.ToSlash(p)}).String()
}

// sarifAnchor is the heading anchor of a rule's section in docs/lint.md
// ("## OBX003 `outbox-poll-order`" → obx003-outbox-poll-order).
func sarifAnchor(r Rule) string {
	b := []byte{}
	for _, c := range []byte(r.ID + " " + r.Name) {
		switch {
		case c >= 'A' && c <= 'Z':
			b = append(b, c+'a'-'A')
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-':
			b = append(b, c)
		case c == ' ':
			b = append(b, '-')
		}
	}
	return string(b)
}
