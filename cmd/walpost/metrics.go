package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/outbox"
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

// metrics are walpost's Prometheus series (README "Metrics"). The
// registry is injected; nil registers nothing (tests).
type metrics struct {
	received     prometheus.Counter
	produced     *prometheus.CounterVec
	poisoned     *prometheus.CounterVec
	replayed     *prometheus.CounterVec
	reconnects   *prometheus.CounterVec
	orderBroken  *prometheus.CounterVec
	produceLat   prometheus.Histogram
	commitToAck  prometheus.Histogram
	confirmedLSN prometheus.Gauge
	receivedLSN  prometheus.Gauge
	lagBytes     prometheus.Gauge
	retained     prometheus.Gauge
	walStatus    *prometheus.GaugeVec
	state        *prometheus.GaugeVec

	mu        sync.Mutex
	cur       string
	tracker   atomic.Pointer[checkpoint.Tracker]
	confirmed atomic.Uint64
	movedAt   atomic.Int64 // unix nanos when the confirmed LSN last moved
	retainedB atomic.Int64
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
		replayed:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walpost_events_replayed_total", Help: "Poison rows replayed, by topic."}, []string{"topic"}),
		orderBroken: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walpost_order_violations_total", Help: "Records appended ahead of an earlier record of their partition that the broker refused, by topic."}, []string{"topic"}),
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
		state:        prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "walpost_state", Help: "Forwarder state (1 for the current state)."}, []string{"state"}),
	}
	inflightEvents := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "walpost_inflight_events", Help: "Events read and not yet acked or quarantined."}, func() float64 {
		if t := m.tracker.Load(); t != nil {
			e, _ := t.InFlight()
			return float64(e)
		}
		return 0
	})
	inflightBytes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "walpost_inflight_bytes", Help: "Bytes of the in-flight events."}, func() float64 {
		if t := m.tracker.Load(); t != nil {
			_, b := t.InFlight()
			return float64(b)
		}
		return 0
	})
	oldest := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "walpost_oldest_unconfirmed_event_age_seconds", Help: "Age of the oldest transaction received and not yet confirmed (0 when none)."}, func() float64 {
		if t := m.tracker.Load(); t != nil {
			if at, ok := t.OldestPending(); ok && !at.IsZero() {
				return time.Since(at).Seconds()
			}
		}
		return 0
	})
	for _, c := range []prometheus.Collector{m.received, m.produced, m.poisoned, m.replayed, m.reconnects, m.orderBroken, m.produceLat, m.commitToAck,
		m.confirmedLSN, m.receivedLSN, m.lagBytes, m.retained, m.walStatus, m.state, inflightEvents, inflightBytes, oldest} {
		f(c)
	}
	m.movedAt.Store(time.Now().UnixNano())
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

func (m *metrics) onReceived(*outbox.Event) { m.received.Inc() }

func (m *metrics) onPoisoned(topic, class string) { m.poisoned.WithLabelValues(topic, class).Inc() }

func (m *metrics) onOrderViolation(topic string, _ int32) { m.orderBroken.WithLabelValues(topic).Inc() }

// onAck records an acknowledged event: produce latency, commit-to-ack
// latency and the produced counter of its topic.
func (m *metrics) onAck(defaultTopic string) func(topic string, commit time.Time, produceLatency time.Duration, now time.Time) {
	var counters sync.Map // topic → prometheus.Counter
	def := m.produced.WithLabelValues(defaultTopic)
	return func(topic string, commit time.Time, produceLatency time.Duration, now time.Time) {
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
			c, _ = counters.LoadOrStore(strings.Clone(topic), m.produced.WithLabelValues(topic))
		}
		c.(prometheus.Counter).Inc()
	}
}

// ready says whether walpost makes progress, and why not.
func (m *metrics) ready(cfg *config.Config) (bool, string) {
	st := m.currentState()
	if st != stateStreaming && st != stateBackpressured {
		return false, "not streaming: state " + st
	}
	if t := m.tracker.Load(); t != nil {
		if events, _ := t.InFlight(); events > 0 || t.Pending() {
			stalled := time.Since(time.Unix(0, m.movedAt.Load()))
			if stalled > cfg.HTTP.ReadyStallTimeout {
				return false, fmt.Sprintf("events are pending (%d in flight) and the confirmed LSN has not moved for %s (http.ready_stall_timeout %s)",
					events, stalled.Round(time.Second), cfg.HTTP.ReadyStallTimeout)
			}
		}
	}
	if limit := cfg.HTTP.ReadyMaxRetainedBytes; limit > 0 {
		if r := m.retainedB.Load(); r > limit {
			return false, fmt.Sprintf("the slot retains %d bytes of WAL, above http.ready_max_retained_bytes %d", r, limit)
		}
	}
	return true, "streaming"
}

// monitorSlot polls the slot's lag, retained WAL and wal_status.
func (m *metrics) monitorSlot(ctx context.Context, pool *pgxpool.Pool, slot string, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		var lag, retained *int64
		var status *string
		err := pool.QueryRow(ctx, `
			SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint,
			       pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, wal_status
			FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&lag, &retained, &status)
		if err == nil {
			if lag != nil {
				m.lagBytes.Set(float64(*lag))
			}
			if retained != nil {
				m.retained.Set(float64(*retained))
				m.retainedB.Store(*retained)
			}
			if status != nil {
				for _, s := range []string{"reserved", "extended", "unreserved", "lost"} {
					v := 0.0
					if s == *status {
						v = 1
					}
					m.walStatus.WithLabelValues(s).Set(v)
				}
			}
		} else if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			log.Debug("slot monitor", "slot", slot, "err", err.Error())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// serveHTTP serves /metrics, /healthz and /readyz until ctx ends.
func serveHTTP(ctx context.Context, cfg *config.Config, reg *prometheus.Registry, m *metrics, log *slog.Logger) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	// Go's profiler, for performance investigations (go tool pprof
	// http://HOST/debug/pprof/profile).
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, reason := m.ready(cfg)
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = w.Write([]byte(reason + "\n"))
	})
	ln, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("http.listen %s: %w", cfg.HTTP.Listen, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("serving metrics and health", "addr", ln.Addr().String())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
