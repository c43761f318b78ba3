// Command nemesis turns the results of the seeded nemesis on three brokers
// (make nemesis; integration.TestNemesisCluster writes one JSON line per
// schedule) into a Markdown report and an SVG chart of recovery time per
// fault kind beside it.
//
//	go run ./bench/nemesis -in results.jsonl -out bench/results/nemesis-<date>.md
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"html"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

type step struct {
	Kind       string  `json:"kind"`
	Detail     string  `json:"detail"`
	RecoveryMs float64 `json:"recovery_ms"`
}

type readyz struct {
	RedAfterMs   float64 `json:"red_after_ms"`
	GreenAfterMs float64 `json:"green_after_ms"`
}

type result struct {
	Seed          uint64   `json:"seed"`
	Mode          string   `json:"mode"`
	Faults        []step   `json:"faults"`
	Written       int      `json:"written"`
	Delivered     int      `json:"delivered"`
	Lost          int      `json:"lost"`
	OutOfOrder    int      `json:"out_of_order"`
	Unexpected    int      `json:"unexpected"`
	Duplicates    int      `json:"duplicates"`
	DupRdkafka    int      `json:"duplicates_librdkafka"`
	LostRdkafka   int      `json:"lost_librdkafka"`
	OverBound     int      `json:"duplicates_over_bound"`
	Poisoned      int      `json:"poisoned"`
	Sessions      int      `json:"sessions"`
	Exits         int      `json:"exits"`
	StartFailures int      `json:"start_failures"`
	PeakRSSKB     int64    `json:"peak_rss_kb"`
	Readyz        []readyz `json:"readyz"`
	Seconds       float64  `json:"seconds"`
	Failures      []string `json:"failures"`
}

func main() {
	in := flag.String("in", "", "results.jsonl of TestNemesisCluster (comma-separated for several)")
	out := flag.String("out", "", "the Markdown report to write; the chart goes beside it (.svg)")
	note := flag.String("note", "", "a line added under the title (how the run was made)")
	rev := flag.String("rev", "", "the walpost commit the results are of (default: HEAD now)")
	flag.Parse()
	if *in == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "nemesis: -in and -out are required (see go doc ./bench/nemesis)")
		os.Exit(2)
	}
	var rs []result
	for _, path := range strings.Split(*in, ",") {
		got, err := read(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "nemesis: %v\n", err)
			os.Exit(1)
		}
		rs = append(rs, got...)
	}
	if len(rs) == 0 {
		fmt.Fprintf(os.Stderr, "nemesis: %s holds no schedule\n", *in)
		os.Exit(1)
	}
	svg := strings.TrimSuffix(*out, filepath.Ext(*out)) + ".svg"
	kinds := byKind(rs)
	if err := os.WriteFile(svg, []byte(chart(kinds)), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "nemesis: %v\n", err)
		os.Exit(1)
	}
	if *rev == "" {
		b, _ := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
		*rev = strings.TrimSpace(string(b))
	}
	md := report(rs, kinds, filepath.Base(svg), *note, *rev)
	if err := os.WriteFile(*out, []byte(md), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "nemesis: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("nemesis: %d schedules → %s, %s\n", len(rs), *out, svg)
}

func read(path string) ([]result, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	var rs []result
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for line := 1; sc.Scan(); line++ {
		var r result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, line, err)
		}
		rs = append(rs, r)
	}
	return rs, sc.Err()
}

// kindStats is one fault kind across every schedule.
type kindStats struct {
	Kind       string
	Count      int
	ByMode     map[string]int
	Recoveries []float64 // ms, sorted; never-recovered excluded
	Never      int
}

func byKind(rs []result) []*kindStats {
	m := map[string]*kindStats{}
	for _, r := range rs {
		for _, s := range r.Faults {
			k := m[s.Kind]
			if k == nil {
				k = &kindStats{Kind: s.Kind, ByMode: map[string]int{}}
				m[s.Kind] = k
			}
			k.Count++
			k.ByMode[r.Mode]++
			if s.RecoveryMs < 0 {
				k.Never++
			} else {
				k.Recoveries = append(k.Recoveries, s.RecoveryMs)
			}
		}
	}
	var ks []*kindStats
	for _, k := range m {
		sort.Float64s(k.Recoveries)
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].Kind < ks[j].Kind })
	return ks
}

// quantile is the nearest-rank quantile of sorted xs (NaN when empty).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[max(0, min(i, len(xs)-1))]
}

func secs(ms float64) string {
	if math.IsNaN(ms) {
		return "–"
	}
	return fmt.Sprintf("%.1f s", ms/1000)
}

func report(rs []result, kinds []*kindStats, svg, note, rev string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# The seeded nemesis on three brokers — %s\n\n", time.Now().UTC().Format("2006-01-02"))
	if note != "" {
		fmt.Fprintf(&b, "%s\n\n", note)
	}
	fmt.Fprintf(&b, "walpost %s; %d CPUs (%s/%s). Kafka: three combined broker+controller nodes (KAFKA_NODES=3), replication factor 3, min.insync.replicas 2, 512 MiB heap each; PostgreSQL wal_sender_timeout 5 s; walpost's /readyz stall timeout 5 s, exactly-once transaction timeout 10 s. Eight writers (transactions of 1–60 rows) throughout. Made by `make nemesis` (integration.TestNemesisCluster, then `go run ./bench/nemesis`); one schedule is replayed with `make nemesis SEED=<seed> SCHEDULES=1 MODES=<mode>`.\n\n",
		rev, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)

	modes, t, reds, greens := totalsByMode(rs)
	writeVerdict(&b, modes, t)
	sort.Float64s(reds)
	sort.Float64s(greens)
	if len(reds) > 0 {
		fmt.Fprintf(&b, "/readyz with two brokers down (%d times): red after p50 %s, max %s; green again after the brokers' return p50 %s, max %s (-1 would be never).\n\n",
			len(reds), secs(quantile(reds, .5)), secs(reds[len(reds)-1]), secs(quantile(greens, .5)), secs(greens[len(greens)-1]))
	}

	writeFaults(&b, kinds, svg)
	writeFailures(&b, rs)
	writeSchedules(&b, rs)
	return b.String()
}

// modeTotals sums the schedules of one delivery mode.
type modeTotals struct {
	schedules, written, delivered, lost, ooo, unexpected, dups, dupsRd, lostRd, over, poisoned, sessions, exits, startFail, failed int
	rss                                                                                                                            int64
	secs                                                                                                                           float64
}

// totalsByMode sums rs per delivery mode, the two known modes first, and collects the /readyz timings.
func totalsByMode(rs []result) (modes []string, t map[string]*modeTotals, reds, greens []float64) {
	modes = []string{"at-least-once", "exactly-once"}
	t = map[string]*modeTotals{}
	for _, m := range modes {
		t[m] = &modeTotals{}
	}
	for _, r := range rs {
		x := t[r.Mode]
		if x == nil {
			x = &modeTotals{}
			t[r.Mode] = x
			modes = append(modes, r.Mode)
		}
		x.schedules++
		x.written += r.Written
		x.delivered += r.Delivered
		x.lost += r.Lost
		x.ooo += r.OutOfOrder
		x.unexpected += r.Unexpected
		x.dups += r.Duplicates
		x.dupsRd += r.DupRdkafka
		x.lostRd += r.LostRdkafka
		x.over += r.OverBound
		x.poisoned += r.Poisoned
		x.sessions += r.Sessions
		x.exits += r.Exits
		x.startFail += r.StartFailures
		x.rss = max(x.rss, r.PeakRSSKB)
		x.secs += r.Seconds
		if len(r.Failures) > 0 {
			x.failed++
		}
		for _, z := range r.Readyz {
			reds = append(reds, z.RedAfterMs)
			greens = append(greens, z.GreenAfterMs)
		}
	}
	return modes, t, reds, greens
}

// writeVerdict writes the table of totals, one column per mode, and the events in all.
func writeVerdict(b *strings.Builder, modes []string, t map[string]*modeTotals) {
	b.WriteString("## Verdict per delivery mode\n\n")
	b.WriteString("| | " + strings.Join(modes, " | ") + " |\n|---|" + strings.Repeat("---|", len(modes)) + "\n")
	row := func(name string, f func(*modeTotals) string) {
		b.WriteString("| " + name + " |")
		for _, m := range modes {
			b.WriteString(" " + f(t[m]) + " |")
		}
		b.WriteString("\n")
	}
	row("schedules (failed)", func(x *modeTotals) string { return fmt.Sprintf("%d (%d)", x.schedules, x.failed) })
	row("events committed", func(x *modeTotals) string { return fmt.Sprint(x.written) })
	row("delivered (distinct keys)", func(x *modeTotals) string { return fmt.Sprint(x.delivered) })
	row("lost", func(x *modeTotals) string { return fmt.Sprint(x.lost) })
	row("out of order (per key and partition)", func(x *modeTotals) string { return fmt.Sprint(x.ooo) })
	row("delivered but never committed", func(x *modeTotals) string { return fmt.Sprint(x.unexpected) })
	row("quarantined (poison_outbox)", func(x *modeTotals) string { return fmt.Sprint(x.poisoned) })
	row("duplicates, franz-go read_committed", func(x *modeTotals) string { return fmt.Sprint(x.dups) })
	row("duplicates, librdkafka read_committed", func(x *modeTotals) string {
		if x.dupsRd == 0 && x.lostRd == 0 && x.schedules > 0 && x != t["exactly-once"] {
			return "(not read)"
		}
		return fmt.Sprintf("%d (lost %d)", x.dupsRd, x.lostRd)
	})
	row("duplicates beyond their bound", func(x *modeTotals) string { return fmt.Sprint(x.over) })
	row("sessions (starts)", func(x *modeTotals) string { return fmt.Sprint(x.sessions) })
	row("walpost exits by itself (+ at start, Kafka unreachable)", func(x *modeTotals) string { return fmt.Sprintf("%d (+%d)", x.exits, x.startFail) })
	row("peak RSS", func(x *modeTotals) string { return fmt.Sprintf("%.0f MiB", float64(x.rss)/1024) })
	row("time", func(x *modeTotals) string { return fmt.Sprintf("%.0f min", x.secs/60) })
	total := 0
	for _, m := range modes {
		total += t[m].written
	}
	fmt.Fprintf(b, "\n%d events in all. At-least-once duplicates are bounded per key: a record may appear at most once per session that started (from the slot's confirmed position) at or before its commit.\n\n", total)
}

// writeFaults writes the recovery times per fault kind.
func writeFaults(b *strings.Builder, kinds []*kindStats, svg string) {
	b.WriteString("## Faults and recovery\n\n")
	fmt.Fprintf(b, "Recovery: from the heal (for a fault that heals itself — a kill, a crash with restart, a takeover, a moved leader, a large transaction — from the end of its hold) until the slot confirmed every WAL byte written before that moment; it includes catching up with what the writers committed meanwhile.\n\n![recovery time per fault kind](%s)\n\n", svg)
	b.WriteString("| fault | hits | at-least-once | exactly-once | recovery p50 | p99 | max | never |\n|---|---|---|---|---|---|---|---|\n")
	for _, k := range kinds {
		mx := math.NaN()
		if len(k.Recoveries) > 0 {
			mx = k.Recoveries[len(k.Recoveries)-1]
		}
		fmt.Fprintf(b, "| %s | %d | %d | %d | %s | %s | %s | %d |\n", k.Kind, k.Count, k.ByMode["at-least-once"], k.ByMode["exactly-once"],
			secs(quantile(k.Recoveries, .5)), secs(quantile(k.Recoveries, .99)), secs(mx), k.Never)
	}
}

// writeFailures lists every failure, one line each.
func writeFailures(b *strings.Builder, rs []result) {
	b.WriteString("\n## Failures\n\n")
	nf := 0
	for _, r := range rs {
		for _, f := range r.Failures {
			nf++
			fmt.Fprintf(b, "- seed %d (%s): %s\n", r.Seed, r.Mode, strings.ReplaceAll(firstLine(f), "|", "\\|"))
		}
	}
	if nf == 0 {
		b.WriteString("None.\n")
	}
}

// writeSchedules writes the table of schedules.
func writeSchedules(b *strings.Builder, rs []result) {
	b.WriteString("\n## Schedules\n\n| seed | mode | faults | events | duplicates | sessions | time | result |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		var fs []string
		for _, s := range r.Faults {
			fs = append(fs, s.Kind)
		}
		res := "ok"
		if len(r.Failures) > 0 {
			res = "FAILED"
		}
		fmt.Fprintf(b, "| %d | %s | %s | %d | %d | %d | %.0f s | %s |\n", r.Seed, r.Mode, strings.Join(fs, ", "), r.Written, r.Duplicates, r.Sessions, r.Seconds, res)
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// chart draws, per fault kind, a bar to the p50 recovery time and a tick
// at the p99, on a linear axis in seconds.
func chart(kinds []*kindStats) string {
	const left, right, rowH, top = 250, 40, 22, 40
	width := 900
	plotW := float64(width - left - right)
	maxMs := 1000.0
	for _, k := range kinds {
		if q := quantile(k.Recoveries, .99); !math.IsNaN(q) {
			maxMs = max(maxMs, q)
		}
	}
	step := niceStep(maxMs / 1000 / 6)
	axisMax := math.Ceil(maxMs/1000/step) * step
	x := func(ms float64) float64 { return left + plotW*ms/1000/axisMax }
	height := top + rowH*len(kinds) + 50
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14" font-weight="bold">Recovery time per fault kind (heal → slot confirmed): bar p50, tick p99</text>`+"\n", 10)
	for v := 0.0; v <= axisMax+1e-9; v += step {
		px := x(v * 1000)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", px, top-5, px, top+rowH*len(kinds))
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%g s</text>`+"\n", px, top+rowH*len(kinds)+16, v)
	}
	for i, k := range kinds {
		y := top + rowH*i
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s (%d)</text>`+"\n", left-8, y+15, html.EscapeString(k.Kind), k.Count)
		p50, p99 := quantile(k.Recoveries, .5), quantile(k.Recoveries, .99)
		if math.IsNaN(p50) {
			continue
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="#4a7bb7"/>`+"\n", left, y+4, x(p50)-left, rowH-8)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#c0392b" stroke-width="3"/>`+"\n", x(p99), y+2, x(p99), y+rowH-2)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555">(n) = hits; bar = p50, red tick = p99</text>`+"\n", left, height-10)
	b.WriteString("</svg>\n")
	return b.String()
}

// niceStep rounds s up to 1, 2 or 5 times a power of ten.
func niceStep(s float64) float64 {
	if s <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(s)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= s {
			return m * p
		}
	}
	return 10 * p
}
