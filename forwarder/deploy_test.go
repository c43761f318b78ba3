package forwarder

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"
)

// describingRegisterer records the descriptors of what is registered on
// it: the names and labels of every series, including vectors that have
// no child yet (which a Gather would not show).
type describingRegisterer struct{ descs []*prometheus.Desc }

func (d *describingRegisterer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		d.descs = append(d.descs, desc)
	}
	return nil
}

func (d *describingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = d.Register(c)
	}
}

func (d *describingRegisterer) Unregister(prometheus.Collector) bool { return false }

var (
	descNameRE   = regexp.MustCompile(`fqName: "([^"]+)"`)
	descLabelsRE = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	descConstRE  = regexp.MustCompile(`constLabels: \{([^}]*)\}`)
)

// exported maps every walpost_* series name the forwarder registers to
// its label names. Histograms add their _bucket (with le), _sum and _count.
func exported(t *testing.T) map[string][]string {
	t.Helper()
	f, err := New(testConfig(t), Deps{})
	if err != nil {
		t.Fatal(err)
	}
	var rec describingRegisterer
	f.registerMetrics(&rec, Build{})
	// franz-go's metrics, as openKafka registers them on the producer
	// (kprom registers them when the client is created; it does not
	// connect).
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), kgo.WithHooks(kprom.NewMetrics("walpost_kafka", kprom.Registerer(&rec))))
	if err != nil {
		t.Fatal(err)
	}
	cl.Close()
	out := map[string][]string{}
	for _, d := range rec.descs {
		s := d.String()
		m := descNameRE.FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("cannot read the name of %s", s)
		}
		var labels []string
		for _, re := range []*regexp.Regexp{descLabelsRE, descConstRE} {
			if l := re.FindStringSubmatch(s); l != nil && l[1] != "" {
				for _, part := range strings.Split(l[1], ",") {
					name, _, _ := strings.Cut(part, "=")
					labels = append(labels, strings.TrimSuffix(strings.TrimPrefix(name, "c("), ")"))
				}
			}
		}
		out[m[1]] = labels
	}
	for _, h := range []string{"walpost_commit_to_ack_seconds", "walpost_produce_latency_seconds"} {
		if _, ok := out[h]; !ok {
			t.Fatalf("histogram %s is not registered", h)
		}
		out[h+"_bucket"] = append(slices.Clone(out[h]), "le")
		out[h+"_sum"], out[h+"_count"] = out[h], out[h]
	}
	if len(out) < 20 {
		t.Fatalf("only %d series found: %v", len(out), out)
	}
	return out
}

var (
	// A walpost series in PromQL, with its selector if it has one.
	seriesRE = regexp.MustCompile(`\b(walpost_[a-zA-Z0-9_]+)\b(\{[^}]*\})?`)
	// A label matcher inside a selector.
	matcherRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
)

// checkExpr reports every walpost_* series expr uses that walpost does
// not export, and every label its selectors match on that the series does
// not have (job and instance come from the scrape). It returns how many
// walpost series expr uses. A regexp is enough here: the PromQL parser
// (github.com/prometheus/prometheus/promql/parser) would pull most of
// Prometheus into walpost's module for a check of names.
func checkExpr(t *testing.T, where, expr string, known map[string][]string) int {
	t.Helper()
	n := 0
	for _, m := range seriesRE.FindAllStringSubmatch(expr, -1) {
		n++
		labels, ok := known[m[1]]
		if !ok {
			t.Errorf("%s uses %s, which walpost does not export", where, m[1])
			continue
		}
		for _, lm := range matcherRE.FindAllStringSubmatch(m[2], -1) {
			if l := lm[1]; l != "job" && l != "instance" && !slices.Contains(labels, l) {
				t.Errorf("%s matches %s on label %q, which it does not have (labels: %v)", where, m[1], l, labels)
			}
		}
	}
	return n
}

// readmeAnchors are the anchors of the README's headings, as GitHub makes
// them: lower case, punctuation dropped, spaces as hyphens.
func readmeAnchors(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		h, ok := strings.CutPrefix(line, "#")
		if !ok {
			continue
		}
		h = strings.TrimSpace(strings.TrimLeft(h, "#"))
		out[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")] = true
	}
	return out
}

// TestAlertRules: deploy/prometheus/alerts.yml parses as Prometheus rule
// groups, every rule is an alert with an expression, a severity, a summary
// and a runbook link to a heading of the README, and every walpost series
// it uses is one walpost exports, with labels it has.
func TestAlertRules(t *testing.T) {
	known := exported(t)
	anchors := readmeAnchors(t)
	b, err := os.ReadFile("../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Record      string            `yaml:"record"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	alerts := map[string]bool{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			where := "alert " + r.Alert
			if r.Alert == "" || r.Record != "" {
				t.Errorf("group %s: a rule that is not an alert: %+v", g.Name, r)
				continue
			}
			if alerts[r.Alert] {
				t.Errorf("%s defined twice", where)
			}
			alerts[r.Alert] = true
			if checkExpr(t, where, r.Expr, known) == 0 {
				t.Errorf("%s uses no walpost series: %q", where, r.Expr)
			}
			if strings.Count(r.Expr, "(") != strings.Count(r.Expr, ")") {
				t.Errorf("%s: unbalanced parentheses in %q", where, r.Expr)
			}
			if sev := r.Labels["severity"]; sev != "warning" && sev != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", where, sev)
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("%s has no summary", where)
			}
			url := r.Annotations["runbook_url"]
			_, anchor, ok := strings.Cut(url, "README.md#")
			if !ok || !strings.HasPrefix(url, "https://github.com/walpost/walpost/blob/main/README.md#") {
				t.Errorf("%s: runbook_url %q does not point into the README", where, url)
			} else if !anchors[anchor] {
				t.Errorf("%s: runbook_url anchor #%s is no heading of the README", where, anchor)
			}
		}
	}
	for _, want := range []string{"WalpostSlotRetainedWALHigh", "WalpostConfirmedLSNStalled", "WalpostEventsPoisoned",
		"WalpostNotReady", "WalpostOrderViolation", "WalpostKafkaDataLoss"} {
		if !alerts[want] {
			t.Errorf("no alert %s", want)
		}
	}
}

// TestGrafanaDashboard: deploy/grafana/walpost.json is a dashboard whose
// every query uses walpost series walpost exports, with the panels the
// operator needs.
func TestGrafanaDashboard(t *testing.T) {
	known := exported(t)
	b, err := os.ReadFile("../deploy/grafana/walpost.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title      string `json:"title"`
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title       string `json:"title"`
			Type        string `json:"type"`
			FieldConfig struct {
				Defaults struct {
					Unit string `json:"unit"`
				} `json:"defaults"`
			} `json:"fieldConfig"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("walpost.json: %v", err)
	}
	if dash.Title == "" || dash.UID == "" {
		t.Errorf("dashboard without title or uid")
	}
	used := map[string]bool{}
	for _, v := range dash.Templating.List {
		checkExpr(t, "variable "+v.Name, v.Definition, known)
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		// One unit per panel, and ranges that follow the scrape interval.
		unit := p.FieldConfig.Defaults.Unit
		if unit == "" {
			t.Errorf("panel %q has no unit", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.Contains(tg.Expr, "[") && !strings.Contains(tg.Expr, "[$__rate_interval]") {
				t.Errorf("panel %q: %q: use [$__rate_interval]", p.Title, tg.Expr)
			}
			seconds := strings.Contains(tg.Expr, "_seconds")
			if (unit == "s") != seconds && unit != "none" {
				t.Errorf("panel %q (unit %s) mixes units: %q", p.Title, unit, tg.Expr)
			}
		}
		for _, tg := range p.Targets {
			if checkExpr(t, "panel "+p.Title, tg.Expr, known) == 0 {
				t.Errorf("panel %q: query %q uses no walpost series", p.Title, tg.Expr)
			}
			for _, m := range seriesRE.FindAllStringSubmatch(tg.Expr, -1) {
				used[m[1]] = true
			}
		}
	}
	// The panels the dashboard promises: throughput, commit→ack latency,
	// slot lag and retained WAL, in-flight, poisoned, reconnects, state.
	for _, want := range []string{"walpost_events_received_total", "walpost_events_produced_total", "walpost_commit_to_ack_seconds_bucket",
		"walpost_replication_lag_bytes", "walpost_slot_retained_wal_bytes", "walpost_inflight_events", "walpost_events_poisoned_total",
		"walpost_reconnects_total", "walpost_state", "walpost_kafka_transactions_total", "walpost_checkpoint_refused_total",
		"walpost_outbox_pruned_rows_total", "walpost_outbox_prune_errors_total", "walpost_position_writes_total",
		"walpost_kafka_produce_bytes_total", "walpost_kafka_connect_errors_total"} {
		if !used[want] {
			t.Errorf("no panel shows %s", want)
		}
	}
}
