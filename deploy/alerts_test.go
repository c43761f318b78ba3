package deploy

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

// alertCase is one alert of prometheus/alerts.yml evaluated by
// Prometheus's own rule engine, as promtool test rules does: over fire,
// series as walpost exports them (labelled counters at 0 from the start,
// then the first occurrence), the alert must fire within the horizon;
// over healthy it must never fire.
type alertCase struct {
	alert          string
	fire, healthy  string // promqltest "load 1m" series
	horizonMinutes int
}

var alertCases = []alertCase{
	{"WalpostSlotRetainedWALHigh",
		`walpost_slot_retained_wal_bytes{job="walpost",instance="a"} 0+1000000000x40`,
		`walpost_slot_retained_wal_bytes{job="walpost",instance="a"} 1000000x40`, 30},
	{"WalpostSlotWALUnreserved",
		`walpost_slot_wal_status{job="walpost",instance="a",wal_status="unreserved"} 0 0 1x20`,
		`walpost_slot_wal_status{job="walpost",instance="a",wal_status="unreserved"} 0x20
		 walpost_slot_wal_status{job="walpost",instance="a",wal_status="reserved"} 1x20`, 10},
	{"WalpostConfirmedLSNStalled",
		`walpost_confirmed_lsn{job="walpost",instance="a"} 100x40
		 walpost_inflight_events{job="walpost",instance="a"} 5x40`,
		`walpost_confirmed_lsn{job="walpost",instance="a"} 0+10x40
		 walpost_inflight_events{job="walpost",instance="a"} 5x40`, 30},
	{"WalpostEventsPoisoned",
		`walpost_events_poisoned_total{job="walpost",instance="a",topic="orders",error_class="MESSAGE_TOO_LARGE"} 0 0 0 1x20`,
		`walpost_events_poisoned_total{job="walpost",instance="a",topic="orders",error_class="MESSAGE_TOO_LARGE"} 0x20`, 10},
	{"WalpostNotReady",
		`walpost_ready{job="walpost",instance="a"} 0x30`,
		`walpost_ready{job="walpost",instance="a"} 1x30`, 20},
	{"WalpostNotStreaming",
		`walpost_state{job="walpost",instance="a",state="streaming"} 0x20
		 walpost_state{job="walpost",instance="a",state="reconnecting"} 1x20`,
		`walpost_state{job="walpost",instance="a",state="streaming"} 1x20
		 walpost_state{job="walpost",instance="a",state="reconnecting"} 0x20`, 15},
	{"WalpostOrderViolation",
		`walpost_order_violations_total{job="walpost",instance="a",topic="orders"} 0 0 1x20`,
		`walpost_order_violations_total{job="walpost",instance="a",topic="orders"} 0x20`, 10},
	{"WalpostKafkaDataLoss",
		`walpost_kafka_data_loss_total{job="walpost",instance="a",topic="orders",partition="2"} 0 0 1x20`,
		`walpost_kafka_data_loss_total{job="walpost",instance="a",topic="orders",partition="2"} 0x20`, 10},
	{"WalpostAbsent",
		`walpost_build_info{job="walpost",instance="a",version="v1",commit="c",goversion="go"} 1x5 _x40`,
		`walpost_build_info{job="walpost",instance="a",version="v1",commit="c",goversion="go"} 1x40`, 30},
	{"WalpostCommitToAckSlow",
		`walpost_commit_to_ack_seconds_bucket{job="walpost",instance="a",le="1"} 0x40
		 walpost_commit_to_ack_seconds_bucket{job="walpost",instance="a",le="60"} 0+100x40
		 walpost_commit_to_ack_seconds_bucket{job="walpost",instance="a",le="+Inf"} 0+100x40`,
		`walpost_commit_to_ack_seconds_bucket{job="walpost",instance="a",le="1"} 0+100x40
		 walpost_commit_to_ack_seconds_bucket{job="walpost",instance="a",le="60"} 0+100x40
		 walpost_commit_to_ack_seconds_bucket{job="walpost",instance="a",le="+Inf"} 0+100x40`, 30},
	{"WalpostPruneFailing",
		`walpost_outbox_prune_errors_total{job="walpost",instance="a"} 0 0 1x20`,
		`walpost_outbox_prune_errors_total{job="walpost",instance="a"} 0x20`, 10},
	{"WalpostKafkaTransactionsAborted",
		`walpost_kafka_transactions_total{job="walpost",instance="a",outcome="aborted"} 0 0 1x20
		 walpost_kafka_transactions_total{job="walpost",instance="a",outcome="committed"} 0+10x22`,
		`walpost_kafka_transactions_total{job="walpost",instance="a",outcome="aborted"} 0x22
		 walpost_kafka_transactions_total{job="walpost",instance="a",outcome="committed"} 0+10x22`, 10},
	{"WalpostPositionWriteFailing",
		`walpost_position_writes_total{job="walpost",instance="a",result="error"} 0 0 1+1x20`,
		`walpost_position_writes_total{job="walpost",instance="a",result="error"} 0x22
		 walpost_position_writes_total{job="walpost",instance="a",result="ok"} 0+100x22`, 15},
}

// TestAlertsFireOnTheFirstOccurrence: every alert of prometheus/alerts.yml
// has a case; each fires on its series and stays silent on a healthy one.
func TestAlertsFireOnTheFirstOccurrence(t *testing.T) {
	p := parser.NewParser(parser.Options{})
	groups, errs := rulefmt.ParseFile("prometheus/alerts.yml", false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("alerts.yml: %v", errs)
	}
	defined := map[string]rulefmt.Rule{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			defined[r.Alert] = r
		}
	}
	tested := map[string]bool{}
	for _, c := range alertCases {
		tested[c.alert] = true
		r, ok := defined[c.alert]
		if !ok {
			t.Errorf("%s: no such alert in alerts.yml", c.alert)
			continue
		}
		t.Run(c.alert, func(t *testing.T) {
			if at, fired := evalAlert(t, p, r, c.fire, c.horizonMinutes); !fired {
				t.Errorf("did not fire within %d minutes on its first occurrence", c.horizonMinutes)
			} else {
				t.Logf("fires at minute %d", at)
			}
			if at, fired := evalAlert(t, p, r, c.healthy, c.horizonMinutes); fired {
				t.Errorf("fired at minute %d on a healthy series", at)
			}
		})
	}
	for name := range defined {
		if !tested[name] {
			t.Errorf("alert %s has no case in alertCases", name)
		}
	}
}

// evalAlert evaluates rule every minute from 0 to horizon over series and
// returns the first minute at which it fires.
func evalAlert(t *testing.T, p parser.Parser, r rulefmt.Rule, series string, horizon int) (int, bool) {
	t.Helper()
	storage := promqltest.LoadedStorage(t, "load 1m\n"+series)
	engine := promqltest.NewTestEngine(t, false, 0, 100000)
	expr, err := p.ParseExpr(r.Expr)
	if err != nil {
		t.Fatalf("%s: %v", r.Alert, err)
	}
	rule := rules.NewAlertingRule(r.Alert, expr, time.Duration(r.For), time.Duration(r.KeepFiringFor),
		labels.FromMap(r.Labels), labels.FromMap(r.Annotations), labels.EmptyLabels(), "", true, slog.New(slog.DiscardHandler))
	query := rules.EngineQueryFunc(engine, storage)
	for m := 0; m <= horizon; m++ {
		ts := time.Unix(0, 0).UTC().Add(time.Duration(m) * time.Minute)
		if _, err := rule.Eval(context.Background(), 0, ts, query, nil, 0); err != nil {
			t.Fatalf("%s at minute %d: %v", r.Alert, m, err)
		}
		for _, a := range rule.ActiveAlerts() {
			if a.State == rules.StateFiring {
				return m, true
			}
		}
	}
	return 0, false
}
