package main

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/config"
)

// syntheticDrain is a drain case of two rounds with every per-round reader.
func syntheticDrain() *caseResult {
	c := &caseResult{workload: wlDrain, payload: 200, backlog: backlog{events: 100_000, avgPayload: 200}}
	for i := range 2 {
		d := time.Duration(i) * 50 * time.Millisecond
		c.rounds = append(c.rounds, roundResult{
			order:   []string{rdRecvlogical, rdCeiling, rdRaw, rdStream, rdWalpost},
			base:    baseResult{wall: 900*time.Millisecond + d},
			ceiling: &baseResult{wall: 500*time.Millisecond + d},
			raw:     &rawResult{wall: 200*time.Millisecond + d},
			stream:  &streamResult{wall: 800*time.Millisecond + d},
			wp:      walpostResult{wall: time.Second + d, acked: time.Second},
		})
	}
	return c
}

// syntheticSteady is a steady case of two rates in one delivery mode, with
// commit→visible samples of 1…n ms.
func syntheticSteady(mode string, rates ...int) *caseResult {
	c := &caseResult{workload: wlSteady, payload: 200, backlog: backlog{avgPayload: 200}}
	for _, rate := range rates {
		us := make([]int64, 500)
		for i := range us {
			us[i] = int64(i+1) * 1000 * int64(rate) / 2000
		}
		c.steady = append(c.steady, steadyResult{mode: mode, rate: rate, events: len(us), achieved: float64(rate), vis: summarize(us, latency{})})
	}
	return c
}

// svgText decodes the SVG at path to its end, failing the test unless it
// is well-formed XML, and returns its character data.
func svgText(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var text strings.Builder
	d := xml.NewDecoder(f)
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", path, err)
		}
		if cd, ok := tok.(xml.CharData); ok {
			text.Write(cd)
			text.WriteByte('\n')
		}
	}
	return text.String()
}

func TestWriteResultDrawsAndLinksCharts(t *testing.T) {
	dir := t.TempDir()
	r := report{
		opts: options{workloads: []string{wlDrain, wlSteady}, payloads: []int{200}, rounds: 2, rates: []int{2000, 10_000}},
		cases: []*caseResult{
			syntheticDrain(),
			syntheticSteady(config.AtLeastOnce, 2000, 10_000),
		},
	}
	path, md, err := writeResult(dir, r)
	if err != nil {
		t.Fatal(err)
	}
	onDisk, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(onDisk) != md {
		t.Errorf("%s differs from the Markdown returned", path)
	}
	base := strings.TrimSuffix(filepath.Base(path), ".md")
	charts := map[string][]string{
		base + "-throughput.svg": {rdRecvlogical, rdCeiling, rdRaw, rdStream, rdWalpost, "round 1", "round 2", "events/s"},
		base + "-latency.svg":    {config.AtLeastOnce + ", 2000 events/s", config.AtLeastOnce + ", 10000 events/s", "fraction of events"},
	}
	for name, labels := range charts {
		text := svgText(t, filepath.Join(dir, name))
		for _, l := range labels {
			if !strings.Contains(text, l) {
				t.Errorf("%s: no text %q; its text:\n%s", name, l, text)
			}
		}
		if link := "](" + name + ")"; !strings.Contains(md, link) {
			t.Errorf("the Markdown does not link %s (%q)", name, link)
		}
	}
	// The charts come before the first workload's tables.
	if i, j := strings.Index(md, base+"-throughput.svg"), strings.Index(md, "\n## "); i < 0 || j < 0 || i > j {
		t.Errorf("the charts are not linked above the first section:\n%s", md)
	}
}

func TestWriteResultDrawsOnlyWhatRan(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cases []*caseResult
		want  string // the one chart drawn
	}{
		{"drain only", []*caseResult{syntheticDrain()}, "-throughput.svg"},
		{"steady only", []*caseResult{syntheticSteady(config.ExactlyOnce, 2000)}, "-latency.svg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			r := report{opts: options{workloads: []string{tc.cases[0].workload}, payloads: []int{200}, rounds: 2}, cases: tc.cases}
			path, md, err := writeResult(dir, r)
			if err != nil {
				t.Fatal(err)
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var svgs []string
			for _, e := range entries {
				if strings.HasSuffix(e.Name(), ".svg") {
					svgs = append(svgs, e.Name())
				}
			}
			want := strings.TrimSuffix(filepath.Base(path), ".md") + tc.want
			if len(svgs) != 1 || svgs[0] != want {
				t.Fatalf("charts written %v, want [%s]", svgs, want)
			}
			if n := strings.Count(md, ".svg)"); n != 1 {
				t.Errorf("the Markdown links %d charts, want 1", n)
			}
		})
	}
}
