package forwarder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// TestLabelledCountersStartAtZero: every labelled counter walpost can know
// at start is exported at 0 before its first increment (each reconnect
// cause, each skip reason, position write result and transaction outcome,
// and for the topic: produced, order violations, each poison class, data
// loss per partition), so increase() over the first increment is 1 and an
// alert fires on the first poison, order violation or data loss.
func TestLabelledCountersStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	m.initTopic("orders", 3)
	want := map[string]int{
		"walpost_reconnects_total":         len(reconnectCauses),
		"walpost_events_produced_total":    1,
		"walpost_order_violations_total":   1,
		"walpost_events_poisoned_total":    len(kafka.RecordClasses),
		"walpost_kafka_data_loss_total":    3,
		"walpost_events_skipped_total":     2,
		"walpost_position_writes_total":    2,
		"walpost_kafka_transactions_total": 2,
		"walpost_checkpoint_refused_total": 3,
	}
	for name, n := range want {
		if got := seriesOf(t, reg, name); got != n {
			t.Errorf("%s: %d series at start, want %d", name, got, n)
		}
	}
	// A topic first seen in an ack gets its series too.
	ack := m.onAck("orders")
	ack("payments", time.Time{}, 0, time.Time{})
	if got := seriesOf(t, reg, "walpost_events_poisoned_total"); got != 2*len(kafka.RecordClasses) {
		t.Errorf("poison series after a record of a new topic: %d, want %d", got, 2*len(kafka.RecordClasses))
	}
}

// TestReconnectCausesAreInitialised: every cause Classify gives is one
// exported at start.
func TestReconnectCausesAreInitialised(t *testing.T) {
	errs := []error{
		nil,
		errors.New("x"),
		&pgconn.PgError{Code: "57P01"},
		io.ErrUnexpectedEOF,
		&sink.Error{Kind: sink.Transient, Err: errors.New("t")},
		&destinationError{Err: errors.New("d")},
		replication.ErrSlotActive,
		errDataLoss,
		fmt.Errorf("%w", errFencedHoldingSlot),
	}
	for _, err := range errs {
		a, cause := Classify(context.Background(), err)
		if a == Fail || a == Stop {
			continue
		}
		if !slices.Contains(reconnectCauses, cause) {
			t.Errorf("Classify(%v) = %q, not in reconnectCauses", err, cause)
		}
	}
}

// seriesOf counts the series of name in reg, each at 0.
func seriesOf(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if v := m.GetCounter().GetValue(); v != 0 {
				t.Errorf("%s %v = %v at start, want 0", name, m.GetLabel(), v)
			}
		}
		return len(mf.GetMetric())
	}
	return 0
}
