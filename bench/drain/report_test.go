package main

import (
	"strings"
	"testing"
	"time"
)

// ceilingDrain is a drain case of three rounds of 100,000 events in which
// walpost takes 1.00, 1.25 and 0.80 s and the decode ceiling 0.50, 0.40 and
// 0.60 s: medians 1.00 s and 0.50 s, round ratios 0.50, 0.32 and 0.75.
func ceilingDrain() *caseResult {
	c := &caseResult{workload: wlDrain, payload: 200, backlog: backlog{events: 100_000, avgPayload: 200}}
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, r := range []struct{ ceil, wp int }{{500, 1000}, {400, 1250}, {600, 800}} {
		c.rounds = append(c.rounds, roundResult{
			order:   []string{rdRecvlogical, rdCeiling, rdWalpost},
			base:    baseResult{wall: ms(900), walsndSecs: -1, kafkaSecs: -1},
			ceiling: &baseResult{wall: ms(r.ceil), cpuSecs: 0.01, walsndSecs: 0.2, kafkaSecs: -1},
			wp:      walpostResult{wall: ms(r.wp), acked: ms(r.wp), walsndSecs: -1, kafkaSecs: -1},
		})
	}
	return c
}

// mdTable returns the rows of the Markdown table in md whose header holds
// the cell first, each as a map from column header to cell.
func mdTable(t *testing.T, md, first string) []map[string]string {
	t.Helper()
	cells := func(l string) []string {
		l = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(l), "|"), "|")
		f := strings.Split(l, "|")
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		return f
	}
	var header []string
	var rows []map[string]string
	for _, l := range strings.Split(md, "\n") {
		switch {
		case !strings.HasPrefix(l, "|"):
			if header != nil {
				return rows
			}
		case header == nil:
			if c := cells(l); c[0] == first {
				header = c
			}
		case strings.HasPrefix(l, "|---"):
		default:
			c := cells(l)
			if len(c) != len(header) {
				t.Fatalf("row of %d cells under a header of %d:\n%s", len(c), len(header), l)
			}
			row := map[string]string{}
			for i, h := range header {
				row[h] = c[i]
			}
			rows = append(rows, row)
		}
	}
	if header == nil {
		t.Fatalf("no table headed %q in:\n%s", first, md)
	}
	return rows
}

func TestRoundsShowTheDecodeCeiling(t *testing.T) {
	var b strings.Builder
	ceilingDrain().writeRounds(&b)
	rows := mdTable(t, b.String(), "round")
	want := []struct{ ceil, ratio, recvRatio string }{
		{"0.50 s", "0.50", "0.90"},
		{"0.40 s", "0.32", "0.72"},
		{"0.60 s", "0.75", "1.12"},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rounds, want %d:\n%s", len(rows), len(want), b.String())
	}
	for i, w := range want {
		got := rows[i]
		if got["decode ceiling"] != w.ceil || got["walpost ÷ decode ceiling"] != w.ratio || got["walpost ÷ pg_recvlogical"] != w.recvRatio {
			t.Errorf("round %d: decode ceiling %q, walpost ÷ decode ceiling %q, walpost ÷ pg_recvlogical %q; want %q, %q, %q",
				i+1, got["decode ceiling"], got["walpost ÷ decode ceiling"], got["walpost ÷ pg_recvlogical"], w.ceil, w.ratio, w.recvRatio)
		}
	}
	if got, want := rows[0]["order"], "pg_recvlogical → decode ceiling → walpost"; got != want {
		t.Errorf("order %q, want %q", got, want)
	}
	if got, want := rows[0]["other processes, cores: pg_recvlogical / ceiling / raw / stream / walpost"], "? / ? / – / – / ?"; got != want {
		t.Errorf("other processes %q, want %q", got, want)
	}
}

func TestMediansShowTheDecodeCeiling(t *testing.T) {
	var b strings.Builder
	ceilingDrain().writeBacklogTable(&b, "", "")
	var ceil, wp map[string]string
	for _, row := range mdTable(t, b.String(), "reader") {
		switch {
		case strings.HasPrefix(row["reader"], "decode ceiling"):
			ceil = row
		case strings.Contains(row["reader"], "walpost → Kafka"):
			wp = row
		}
	}
	if ceil == nil || wp == nil {
		t.Fatalf("no decode ceiling or walpost row:\n%s", b.String())
	}
	for col, want := range map[string]string{
		"time":                        "0.50 s",
		"events/s":                    "200000",
		"MB/s (payload)":              "40.0",
		"walpost ÷ this (events/s)":   "0.50",
		"client CPU s / 1M events":    "0.10",
		"walsender CPU s / 1M events": "2.00",
	} {
		if ceil[col] != want {
			t.Errorf("decode ceiling, %s: %q, want %q", col, ceil[col], want)
		}
	}
	if wp["time"] != "1.00 s" || wp["events/s"] != "100000" {
		t.Errorf("walpost: time %q, events/s %q; want 1.00 s, 100000", wp["time"], wp["events/s"])
	}
}

// On PostgreSQL 14 the ceiling does not run: the tables say so once, in
// the notes, and keep their columns.
func TestReportWithoutDecodeCeiling(t *testing.T) {
	c := ceilingDrain()
	for i := range c.rounds {
		c.rounds[i].ceiling = nil
		c.rounds[i].order = []string{rdRecvlogical, rdWalpost}
	}
	skip := "PostgreSQL 14.12 has no publication row filters (15+)"
	c.ceilNote = skip
	r := report{opts: options{workloads: []string{wlDrain}, payloads: []int{200}, rounds: 3}, cases: []*caseResult{c}, ceilSkip: skip}
	md := r.markdown()
	if n := strings.Count(md, skip); n != 1 {
		t.Errorf("the report gives the reason %d times, want once (in the notes):\n%s", n, md)
	}
	if !strings.Contains(md, "- decode ceiling: not run ("+skip+").") {
		t.Errorf("no note that the decode ceiling did not run:\n%s", md)
	}
	for _, row := range mdTable(t, md, "reader") {
		if strings.HasPrefix(row["reader"], "decode ceiling") {
			t.Errorf("a decode ceiling row without a ceiling: %v", row)
		}
	}
	for i, row := range mdTable(t, md, "round") {
		if row["decode ceiling"] != "–" || row["walpost ÷ decode ceiling"] != "–" {
			t.Errorf("round %d: decode ceiling %q, ratio %q; want –, –", i+1, row["decode ceiling"], row["walpost ÷ decode ceiling"])
		}
	}
	// The table printed while the run goes on has no notes: it says why.
	if s := c.summary(); !strings.Contains(s, "Decode ceiling: not run ("+skip+").") {
		t.Errorf("the summary does not say why the ceiling did not run:\n%s", s)
	}
}
