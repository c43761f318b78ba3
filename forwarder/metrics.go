package forwarder

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/sink/kafka"
)

// States of the forwarder, one gauge each (1 for the current state).
const (
	stateStarting       = "starting"
	stateStreaming      = "streaming"
	stateBackpressured  = "backpressured"
	stateWaitingForSlot = "waiting-for-slot"
	stateReconnecting   = "reconnecting"
	stateStopped        = "stopped"
)

var allStates = []string{stateStarting, stateStreaming, stateBackpressured, stateWaitingForSlot, stateReconnecting, stateStopped}

// metrics are walpost's Prometheus series (README "Metrics"), its state
// machine and the progress readiness reads. The registry is injected; nil
// registers nothing (tests).
type metrics struct {
	received     prometheus.Counter
	produced     *prometheus.CounterVec
	poisoned     *prometheus.CounterVec
	reconnects   *prometheus.CounterVec
	orderBroken  *prometheus.CounterVec
	dataLoss     *prometheus.CounterVec
	produceLat   prometheus.Histogram
	commitToAck  prometheus.Histogram
	confirmedLSN prometheus.Gauge
	receivedLSN  prometheus.Gauge
	lagBytes     prometheus.Gauge
	retained     prometheus.Gauge
	walStatus    *prometheus.GaugeVec
	state        *prometheus.GaugeVec
	standbySync  *prometheus.GaugeVec
	// unprotected is why a failover would lose the slot now (a standby
	// the URL lists has no synced copy yet); empty when protected or
	// when the URL lists no standby.
	unprotected atomic.Pointer[string]

	skipped         *prometheus.CounterVec
	positionWrites  *prometheus.CounterVec
	positionLSN     prometheus.Gauge
	timelineChanged prometheus.Counter
	pruned          prometheus.Counter
	pruneErrors     prometheus.Counter
	transactions    *prometheus.CounterVec
	cpRefused       *prometheus.CounterVec
	traceInvalid    prometheus.Counter

	mu        sync.Mutex
	cur       string
	tracker   atomic.Pointer[checkpoint.Tracker]
	budget    atomic.Pointer[checkpoint.Budget] // the running session's in-flight budget
	confirmed atomic.Uint64
	failures  atomic.Int64 // session failures in a row without progress
	movedAt   atomic.Int64 // unix nanos when the confirmed LSN last moved
	retainedB atomic.Int64
	// For the catch-up progress lines (progress.go).
	receivedN atomic.Uint64
	producedN atomic.Uint64
	lagB      atomic.Int64 // -1 until the slot monitor measures it
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := func(c prometheus.Collector) {
		if reg != nil {
			reg.MustRegister(c)
		}
	}
	m := &metrics{
		received:    prometheus.NewCounter(prometheus.CounterOpts{Name: "walpost_events_received_total", Help: "Outbox inserts decoded from the slot."}),
		produced:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walpost_events_produced_total", Help: "Events acknowledged by Kafka, by topic."}, []string{"topic"}),
		poisoned:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walpost_events_poisoned_total", Help: "Events quarantined in the poison table, by topic and error class."}, []string{"topic", "error_class"}),
		orderBroken: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walpost_order_violations_total", Help: "Records appended ahead of an earlier record of their partition that the broker refused, by topic."}, []string{"topic"}),
		dataLoss:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walpost_kafka_data_loss_total", Help: "Data loss Kafka reported on a partition (records it had acknowledged may be gone); each ends the session, which produces everything after the slot's confirmed position again."}, []string{"topic", "partition"}),
		reconnects:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walpost_reconnects_total", Help: "Replication sessions restarted, by cause."}, []string{"cause"}),
		produceLat: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "walpost_produce_latency_seconds", Help: "From reading the event off the slot (or releasing it after a failed record was settled) to its ack.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}),
		commitToAck: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "walpost_commit_to_ack_seconds", Help: "From the transaction's commit to the ack of its record.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 17)}),
		confirmedLSN: prometheus.NewGauge(prometheus.GaugeOpts{Name: "walpost_confirmed_lsn", Help: "LSN confirmed to the slot (flush position)."}),
		receivedLSN:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "walpost_received_lsn", Help: "Highest LSN received from the slot."}),
		lagBytes:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "walpost_replication_lag_bytes", Help: "Server WAL position minus the slot's confirmed LSN."}),
		retained:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "walpost_slot_retained_wal_bytes", Help: "WAL the slot retains (server WAL position minus restart LSN)."}),
		walStatus:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "walpost_slot_wal_status", Help: "The slot's wal_status (1 for the current value)."}, []string{"wal_status"}),
		standbySync: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "walpost_slot_standby_synced",
			Help: "1 when the standby (a host of postgres.url in recovery, PostgreSQL 17+) has a synced, persistent copy of the slot, so a failover to it loses nothing; 0 while it has none, a temporary one, or cannot be reached."}, []string{"standby"}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "walpost_state", Help: "Forwarder state (1 for the current state)."}, []string{"state"}),

		skipped:         prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walpost_events_skipped_total", Help: "Events read from the slot and not produced, by reason (already_confirmed: the slot was behind walpost's stored position)."}, []string{"reason"}),
		positionWrites:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walpost_position_writes_total", Help: "Writes of walpost_position, by result (ok, error)."}, []string{"result"}),
		positionLSN:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "walpost_position_lsn", Help: "LSN last written to walpost_position."}),
		timelineChanged: prometheus.NewCounter(prometheus.CounterOpts{Name: "walpost_position_timeline_changed_total", Help: "Sessions that started on another timeline than the stored position; transactions were skipped up to the switch point at most."}),
		pruned:          prometheus.NewCounter(prometheus.CounterOpts{Name: "walpost_outbox_pruned_rows_total", Help: "Outbox rows deleted by the prune passes of outbox.retention."}),
		pruneErrors:     prometheus.NewCounter(prometheus.CounterOpts{Name: "walpost_outbox_prune_errors_total", Help: "Prune passes of outbox.retention that failed (logged with the error; forwarding goes on)."}),
		transactions:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walpost_kafka_transactions_total", Help: "Kafka transactions ended in exactly-once mode, by outcome (committed, aborted)."}, []string{"outcome"}),
		traceInvalid:    prometheus.NewCounter(prometheus.CounterOpts{Name: "walpost_trace_context_invalid_total", Help: "Events whose tracing column (mapping.tracing_column) held a malformed trace context: produced without it (a malformed tracestate: without the tracestate), each logged with its id."}),
		cpRefused:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walpost_checkpoint_refused_total", Help: "Exactly-once checkpoints not used because they do not match the server, by reason (went_back: walpost_position went back; ahead_of_server: past the server's WAL; not_in_wal: the WAL below it holds other transactions). Events after walpost_position are sent again."}, []string{"reason"}),
	}
	inflightEvents := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "walpost_inflight_events", Help: "Events read and not yet acked or quarantined."}, func() float64 {
		if b := m.budget.Load(); b != nil {
			e, _ := b.InFlight()
			return float64(e)
		}
		return 0
	})
	inflightBytes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "walpost_inflight_bytes", Help: "Bytes of the in-flight events."}, func() float64 {
		if b := m.budget.Load(); b != nil {
			_, n := b.InFlight()
			return float64(n)
		}
		return 0
	})
	failStreak := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "walpost_reconnect_failures_in_a_row", Help: "Session failures in a row without progress (sessions that delivered no event and ran under a minute); 0 after a session that delivered events. The reconnect back-off grows with it."}, func() float64 {
		return float64(m.failures.Load())
	})
	oldest := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "walpost_oldest_unconfirmed_event_age_seconds", Help: "Age of the oldest transaction received and not yet confirmed (0 when none)."}, func() float64 {
		if t := m.tracker.Load(); t != nil {
			if at, ok := t.OldestPending(); ok && !at.IsZero() {
				return time.Since(at).Seconds()
			}
		}
		return 0
	})
	for _, c := range []prometheus.Collector{m.received, m.produced, m.poisoned, m.reconnects, failStreak, m.orderBroken, m.dataLoss, m.produceLat, m.commitToAck,
		m.confirmedLSN, m.receivedLSN, m.lagBytes, m.retained, m.walStatus, m.state, m.standbySync, inflightEvents, inflightBytes, oldest,
		m.skipped, m.positionWrites, m.positionLSN, m.timelineChanged, m.pruned, m.pruneErrors, m.transactions, m.cpRefused, m.traceInvalid} {
		f(c)
	}
	// Every labelled counter walpost can know at start is exported at 0,
	// so increase() sees its first increment (an alert on the first
	// poison, order violation or data loss fires).
	for _, r := range []string{refusedWentBack, refusedAhead, refusedNotInWAL} {
		m.cpRefused.WithLabelValues(r)
	}
	for _, c := range reconnectCauses {
		m.reconnects.WithLabelValues(c)
	}
	m.skipped.WithLabelValues("already_confirmed")
	m.skipped.WithLabelValues("checkpoint")
	m.positionWrites.WithLabelValues("ok")
	m.positionWrites.WithLabelValues("error")
	m.transactions.WithLabelValues("committed")
	m.transactions.WithLabelValues("aborted")
	m.movedAt.Store(time.Now().UnixNano())
	m.lagB.Store(-1)
	m.setState(stateStarting)
	return m
}

func (m *metrics) setState(s string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == s {
		return
	}
	m.cur = s
	for _, st := range allStates {
		v := 0.0
		if st == s {
			v = 1
		}
		m.state.WithLabelValues(st).Set(v)
	}
}

func (m *metrics) currentState() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cur
}

func (m *metrics) status(received, confirmed pglogrepl.LSN) {
	m.receivedLSN.Set(float64(received))
	m.confirmedLSN.Set(float64(confirmed))
	if prev := m.confirmed.Swap(uint64(confirmed)); prev != uint64(confirmed) {
		m.movedAt.Store(time.Now().UnixNano())
	}
}

func (m *metrics) onReceived(*outbox.Event) {
	m.received.Inc()
	m.receivedN.Add(1)
}

// reconnectCauses are the causes of walpost_reconnects_total (Classify,
// retryCause, waitKafka).
var reconnectCauses = []string{"other", "kafka_destination", "slot_active", "kafka_data_loss", "kafka_fenced_holding_slot",
	"postgres_error", "network", "kafka"}

// initTopic exports topic's counters at 0: produced, order violations,
// each poison class, and data loss of each of its partitions (partitions
// 0: none known).
func (m *metrics) initTopic(topic string, partitions int) {
	m.produced.WithLabelValues(topic)
	m.orderBroken.WithLabelValues(topic)
	for _, c := range kafka.RecordClasses {
		m.poisoned.WithLabelValues(topic, c)
	}
	for p := range partitions {
		m.dataLoss.WithLabelValues(topic, strconv.Itoa(p))
	}
}

func (m *metrics) onPoisoned(topic, class string) { m.poisoned.WithLabelValues(topic, class).Inc() }

func (m *metrics) onOrderViolation(topic string, _ int32) { m.orderBroken.WithLabelValues(topic).Inc() }

// onAck records an acknowledged event: produce latency, commit-to-ack
// latency and the produced counter of its topic.
func (m *metrics) onAck(defaultTopic string) func(topic string, commit time.Time, produceLatency time.Duration, now time.Time) {
	var counters sync.Map // topic → prometheus.Counter
	def := m.produced.WithLabelValues(defaultTopic)
	return func(topic string, commit time.Time, produceLatency time.Duration, now time.Time) {
		m.producedN.Add(1)
		m.produceLat.Observe(produceLatency.Seconds())
		if !commit.IsZero() {
			m.commitToAck.Observe(now.Sub(commit).Seconds())
		}
		if topic == "" || topic == defaultTopic {
			def.Inc()
			return
		}
		c, ok := counters.Load(topic)
		if !ok {
			topic = strings.Clone(topic)
			m.initTopic(topic, 0)
			c, _ = counters.LoadOrStore(topic, m.produced.WithLabelValues(topic))
		}
		c.(prometheus.Counter).Inc()
	}
}

// registerBuildInfo exports walpost_build_info{version,commit,goversion} 1
// on reg (nil: nowhere).
func registerBuildInfo(reg prometheus.Registerer, version, commit, goVersion string) {
	if reg == nil {
		return
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "walpost_build_info",
		Help:        "Always 1; the labels say which walpost runs (version, commit, Go version).",
		ConstLabels: prometheus.Labels{"version": version, "commit": commit, "goversion": goVersion},
	})
	g.Set(1)
	reg.MustRegister(g)
}

// registerReady exports walpost_ready: 1 while /readyz answers 200
// (streaming and making progress, or standing by for the slot).
func registerReady(reg prometheus.Registerer, ready func() (bool, string)) {
	if reg == nil {
		return
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "walpost_ready",
		Help: "1 while /readyz answers 200: streaming and making progress, or standing by ready to take over the slot.",
	}, func() float64 {
		if ok, _ := ready(); ok {
			return 1
		}
		return 0
	}))
}

// newRegistry is a metrics registry with the Go runtime and process
// collectors, as walpost serves it.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// onTxn counts an ended Kafka transaction (exactly-once mode).
func (m *metrics) onTxn(outcome string, _ int) { m.transactions.WithLabelValues(outcome).Inc() }
