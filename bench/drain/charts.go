package main

// The charts written beside a results file X.md: X-throughput.svg, events/s
// of every reader in every round of the drain and bigtxn workloads (the
// rounds table of the Markdown), and X-latency.svg, the empirical CDF of
// commit→visible latency of the steady workload, one line per delivery
// mode and rate. Drawn with gonum's plot and its SVG canvas.

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// chartFiles names the charts written beside a results file, relative to
// its directory; "" when that chart was not drawn.
type chartFiles struct {
	throughput string
	latency    string
}

// Chart geometry: one panel per case, stacked.
const (
	chartWidth  = 16 * vg.Centimeter
	panelHeight = 9 * vg.Centimeter
)

// barWidth is the width of one bar when groups of bars, bars each, share
// the chart's width, at most 18 points.
func barWidth(groups, bars int) vg.Length {
	return min(vg.Points(18), chartWidth*0.7/vg.Length(groups*bars))
}

// minLatency is where the latency chart's log axis starts: a sample below
// it (0 µs, at the resolution of the wall clocks compared) is drawn there.
const minLatency = time.Microsecond

// writeCharts draws the charts of cases into dir as base-throughput.svg and
// base-latency.svg. A chart with nothing to show (no backlog workload, no
// steady workload) is not written. It returns the files it wrote, also when
// one of them failed.
func writeCharts(dir, base string, cases []*caseResult) (chartFiles, error) {
	var files chartFiles
	var errs []error
	if ps, err := throughputPlots(cases); err != nil {
		errs = append(errs, fmt.Errorf("throughput chart: %w", err))
	} else if len(ps) > 0 {
		name := base + "-throughput.svg"
		if err := saveSVG(filepath.Join(dir, name), ps); err != nil {
			errs = append(errs, fmt.Errorf("throughput chart: %w", err))
		} else {
			files.throughput = name
		}
	}
	if ps, err := latencyPlots(cases); err != nil {
		errs = append(errs, fmt.Errorf("latency chart: %w", err))
	} else if len(ps) > 0 {
		name := base + "-latency.svg"
		if err := saveSVG(filepath.Join(dir, name), ps); err != nil {
			errs = append(errs, fmt.Errorf("latency chart: %w", err))
		} else {
			files.latency = name
		}
	}
	return files, errors.Join(errs...)
}

// chartReader is one reader of the rounds table and how to take its wall
// time from a round; ok is false when the reader did not run.
type chartReader struct {
	name string
	wall func(roundResult) (time.Duration, bool)
}

// chartReaders are the readers of the rounds table, in its column order.
var chartReaders = []chartReader{
	{rdRecvlogical, func(x roundResult) (time.Duration, bool) { return x.base.wall, true }},
	{rdCeiling, func(x roundResult) (time.Duration, bool) {
		if x.ceiling == nil {
			return 0, false
		}
		return x.ceiling.wall, true
	}},
	{rdRaw, func(x roundResult) (time.Duration, bool) {
		if x.raw == nil {
			return 0, false
		}
		return x.raw.wall, true
	}},
	{rdStream, func(x roundResult) (time.Duration, bool) {
		if x.stream == nil {
			return 0, false
		}
		return x.stream.wall, true
	}},
	{rdWalpost, func(x roundResult) (time.Duration, bool) { return x.wp.wall, true }},
}

// throughputPlots returns one panel per drain or bigtxn case: a group of
// bars per round, a bar per reader that ran, its height the backlog's
// events ÷ the reader's time in that round.
func throughputPlots(cases []*caseResult) ([]*plot.Plot, error) {
	var ps []*plot.Plot
	for _, c := range cases {
		if c.workload == wlSteady || len(c.rounds) == 0 {
			continue
		}
		p := newPlot()
		p.Title.Text = fmt.Sprintf("%s: %d events, events/s per reader and round", chartTitle(c), c.backlog.events)
		p.Y.Label.Text = "events/s"
		p.Y.Tick.Marker = thousands{}
		p.Legend.Top = true

		type series struct {
			name string
			vals plotter.Values
		}
		var ss []series
		for _, r := range chartReaders {
			vals := make(plotter.Values, len(c.rounds))
			ran := false
			for i, x := range c.rounds {
				if w, ok := r.wall(x); ok {
					ran = true
					if w > 0 {
						vals[i] = float64(c.backlog.events) / w.Seconds()
					}
				}
			}
			if ran {
				ss = append(ss, series{r.name, vals})
			}
		}
		grid := plotter.NewGrid() // under the bars, across them only
		grid.Vertical.Color = nil
		p.Add(grid)
		w := barWidth(len(c.rounds), len(ss))
		for j, s := range ss {
			bars, err := plotter.NewBarChart(s.vals, w)
			if err != nil {
				return nil, fmt.Errorf("%s, %s: %w", chartTitle(c), s.name, err)
			}
			bars.Color = plotutil.Color(j)
			bars.LineStyle.Width = 0
			bars.Offset = (vg.Length(j) - vg.Length(len(ss)-1)/2) * w
			p.Add(bars)
			p.Legend.Add(s.name, bars)
		}
		names := make([]string, len(c.rounds))
		for i := range c.rounds {
			names[i] = "round " + strconv.Itoa(i+1)
		}
		p.NominalX(names...)
		// Half a group of room on either side, and a third above the
		// tallest bar for the legend.
		p.X.Min, p.X.Max = -0.5, float64(len(c.rounds))-0.5
		p.Y.Min, p.Y.Max = 0, p.Y.Max*1.35
		ps = append(ps, p)
	}
	return ps, nil
}

// latencyPlots returns one panel per steady case: the empirical CDF of
// commit→visible latency, a line per delivery mode and offered rate, on a
// log axis in ms.
func latencyPlots(cases []*caseResult) ([]*plot.Plot, error) {
	var ps []*plot.Plot
	for _, c := range cases {
		if c.workload != wlSteady {
			continue
		}
		p := newPlot()
		p.Title.Text = chartTitle(c) + ": commit→visible (read_committed consumer), empirical CDF"
		p.X.Label.Text = "commit→visible latency (ms, log scale)"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Y.Label.Text = "fraction of events"
		p.Y.Min, p.Y.Max = 0, 1
		p.Add(plotter.NewGrid()) // under the lines
		var modes []string
		lines := 0
		for i, s := range c.steady {
			if len(s.vis.cdf) == 0 {
				continue
			}
			xys := make(plotter.XYs, len(s.vis.cdf))
			for k, d := range s.vis.cdf {
				xys[k].X = ms(max(d, minLatency))
				xys[k].Y = float64(k) / float64(len(s.vis.cdf)-1)
			}
			l, err := plotter.NewLine(xys)
			if err != nil {
				return nil, fmt.Errorf("%s, %s: %w", chartTitle(c), latencyLabel(s), err)
			}
			m := slices.Index(modes, s.mode)
			if m < 0 {
				m, modes = len(modes), append(modes, s.mode)
			}
			l.Color = plotutil.Color(i)
			l.Dashes = plotutil.Dashes(m)
			l.Width = vg.Points(1.5)
			p.Add(l)
			p.Legend.Add(latencyLabel(s), l)
			lines++
		}
		if lines == 0 {
			continue
		}
		// From the decade below the fastest event, so that the axis
		// carries at least two labelled powers of ten.
		p.X.Min = math.Pow(10, math.Floor(math.Log10(p.X.Min)))
		ps = append(ps, p)
	}
	return ps, nil
}

// latencyLabel names a steady rate's line in the latency chart.
func latencyLabel(s steadyResult) string {
	return fmt.Sprintf("%s, %d events/s", s.mode, s.rate)
}

func chartTitle(c *caseResult) string {
	return fmt.Sprintf("%s, ~%d-byte payloads", c.workload, c.payload)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// newPlot is plot.New with sans-serif text.
func newPlot() *plot.Plot {
	p := plot.New()
	for _, f := range []*text.Style{&p.Title.TextStyle, &p.X.Label.TextStyle, &p.Y.Label.TextStyle, &p.X.Tick.Label, &p.Y.Tick.Label, &p.Legend.TextStyle} {
		f.Font.Variant = "Sans"
	}
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	return p
}

// thousands labels the default ticks as 0, 40k, 80k, … .
type thousands struct{}

func (thousands) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i, t := range ts {
		switch {
		case t.Label == "":
		case t.Value >= 1000:
			ts[i].Label = strconv.FormatFloat(t.Value/1000, 'f', -1, 64) + "k"
		default:
			ts[i].Label = strconv.FormatFloat(t.Value, 'f', -1, 64)
		}
	}
	return ts
}

// saveSVG draws ps one above the other into an SVG file at path.
func saveSVG(path string, ps []*plot.Plot) error {
	canvas := vgsvg.New(chartWidth, panelHeight*vg.Length(len(ps)))
	rows := make([][]*plot.Plot, len(ps))
	for i, p := range ps {
		rows[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{
		Rows: len(ps), Cols: 1,
		PadY:   vg.Points(18),
		PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(12),
	}
	for i, dc := range plot.Align(rows, tiles, draw.New(canvas)) {
		ps[i].Draw(dc[0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = canvas.WriteTo(f)
	return errors.Join(err, f.Close())
}
