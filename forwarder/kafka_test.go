package forwarder

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/sink/kafka"
)

// Data loss reported by Kafka is counted per topic and partition and ends
// the running session with errDataLoss, which the session loop retries
// (cause kafka_data_loss) from the slot's confirmed position; with no
// session running it is counted and nothing blocks.
func TestDataLossEndsSession(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := &Forwarder{log: slog.New(slog.DiscardHandler), m: newMetrics(reg)}
	f.onDataLoss("orders", 1) // between sessions
	wait, stop := f.newSession(nil).watchDataLoss()
	defer stop()
	go f.onDataLoss("orders", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := wait(ctx)
	if !errors.Is(err, errDataLoss) {
		t.Fatalf("session watch returned %v, want errDataLoss", err)
	}
	if a, cause := Classify(context.Background(), err); a != Retry || cause != "kafka_data_loss" {
		t.Errorf("Classify(%v) = %s, %q; want retry, kafka_data_loss", err, a, cause)
	}
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "walpost_kafka_data_loss_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels string
			for _, l := range m.GetLabel() {
				labels += l.GetName() + "=" + l.GetValue() + ","
			}
			got[labels] = m.GetCounter().GetValue()
		}
	}
	if want := map[string]float64{"partition=1,topic=orders,": 1, "partition=2,topic=orders,": 1}; !maps.Equal(got, want) {
		t.Errorf("walpost_kafka_data_loss_total = %v, want %v", got, want)
	}
	// A second report while the session is ending must not block.
	done := make(chan struct{})
	go func() { f.onDataLoss("orders", 2); f.onDataLoss("orders", 2); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("onDataLoss blocked with the session ending")
	}
	stop()
	ended, cancelEnded := context.WithCancel(context.Background())
	cancelEnded()
	_ = wait(ended) // drains what the session did not read
	if f.lost.Load() != nil {
		t.Error("the session's data-loss signal is still registered after stop")
	}
}

// TestDataLossStopsConfirming: once Kafka reported data loss, acks that
// arrive afterwards do not move the watermark (nor walpost's remembered
// position) past what was confirmed at the report: the transactions
// holding the lost records are produced again by the next session. Before
// the fix the failed session's late acks confirmed them, and the position
// the next session skipped up to included them.
func TestDataLossStopsConfirming(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := &Forwarder{log: slog.New(slog.DiscardHandler), m: newMetrics(reg)}
	tr := checkpoint.New(0x100, nil)
	f.m.tracker.Store(tr)
	x, err := tr.OpenAt(time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	k := tr.Add(x, 1)
	if err := tr.Seal(x, 0x200); err != nil {
		t.Fatal(err)
	}
	_, stop := f.newSession(nil).watchDataLoss()
	defer stop()
	f.onDataLoss("orders", 1)
	tr.Done(k) // the ack of a record in flight when the loss was reported
	if got := tr.Confirmed(); got != 0x100 {
		t.Errorf("confirmed %s after the data loss, want 0/100", got)
	}
	known := position.Row{}
	w := &positionWriter{row: position.Row{Slot: "s"}, tracker: tr, known: &known}
	w.remember()
	if known.LSN > 0x100 {
		t.Errorf("remembered %s after the data loss, want at most 0/100", known.LSN)
	}
}

// TestCheckTopicBlamesTheRightKey: when no broker answers, the error names
// kafka.brokers (its variable and the fix), not the topic; when a broker
// answers that the topic is missing, it names kafka.topic.
func TestCheckTopicBlamesTheRightKey(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Kafka.Topic = "orders"
	f := &Forwarder{cfg: cfg, log: slog.New(slog.DiscardHandler), m: newMetrics(prometheus.NewRegistry())}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := f.checkTopic(ctx)
	if err == nil || !strings.HasPrefix(err.Error(), "kafka.brokers: no broker of [127.0.0.1:1] answered") || !strings.Contains(err.Error(), "WALPOST_KAFKA_BROKERS") {
		t.Errorf("no broker: %v, want kafka.brokers named with its variable", err)
	}

	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg.Kafka.Brokers = c.ListenAddrs()
	f.cfg = cfg
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	err = f.checkTopic(ctx2)
	if err == nil || !strings.HasPrefix(err.Error(), "kafka.topic: ") || !errors.Is(err, kafka.ErrTopicMissing) {
		t.Errorf("missing topic: %v, want kafka.topic named", err)
	}
}
