package forwarder

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Data loss reported by Kafka is counted per topic and partition and ends
// the running session with ErrDataLoss, which the session loop retries
// (cause kafka_data_loss) from the slot's confirmed position; with no
// session running it is counted and nothing blocks.
func TestDataLossEndsSession(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := &Forwarder{log: slog.New(slog.DiscardHandler), m: newMetrics(reg)}
	f.onDataLoss("orders", 1) // between sessions
	wait, stop := f.watchDataLoss()
	defer stop()
	go f.onDataLoss("orders", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := wait(ctx)
	if !errors.Is(err, ErrDataLoss) {
		t.Fatalf("session watch returned %v, want ErrDataLoss", err)
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
