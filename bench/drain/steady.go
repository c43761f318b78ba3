package main

// The steady workload: walpost runs live on a fresh slot while paced
// writers insert at a fixed rate; a consumer then reads the topic (created
// with message.timestamp.type=LogAppendTime, so every record carries the
// broker's append time) and computes commit→append latency per event. A
// read_committed consumer reads the topic live meanwhile: commit→visible is
// when it first received each event (in exactly-once mode records become
// visible only when their Kafka transaction commits, after their append).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/config"
)

type latency struct {
	n             int
	p50, p99, max time.Duration
	min           time.Duration
	dups          int
	// cdf[i] is the nearest-rank quantile i/cdfSteps of the samples
	// (cdf[0] their minimum): the empirical CDF the latency chart draws,
	// in cdfSteps+1 values whatever the number of events.
	cdf []time.Duration
}

// cdfSteps is how finely latency keeps its distribution for the chart.
const cdfSteps = 1000

type steadyResult struct {
	mode       string        // walpost's delivery mode (config.AtLeastOnce or config.ExactlyOnce)
	rate       int           // offered events/s
	events     int           // written (= offered rate × seconds)
	writeDur   time.Duration // clock start → last commit returned
	achieved   float64       // events / max(writeDur, the scheduled duration)
	maxLate    time.Duration // worst delay of a transaction's start behind its schedule
	tail       time.Duration // last commit → slot confirmed everything
	lat        latency
	vis        latency // commit → first received by a live read_committed consumer
	cpuSecs    float64 // walpost CPU from the first write until everything was confirmed
	walsndSecs float64 // its walsender's CPU meanwhile (-1: unknown)
	kafkaSecs  float64 // broker CPU meanwhile (-1: unknown)
	busySecs   float64 // machine CPU meanwhile
	hwmKiB     int64   // walpost's VmHWM (its process lives for this rate only)
	rssKiB     int64
	commits    int64 // exactly-once: Kafka transactions committed (-1: at-least-once, or unknown)
}

// runSteadyCase runs every rate of the steady workload with one payload
// size, each rate with its own slot, topic and walpost process.
func (e *env) runSteadyCase(ctx context.Context, payloadSize int) (*caseResult, error) {
	f, o := e.f, e.o
	tag := fmt.Sprintf("%s_%d", wlSteady, payloadSize)
	c := &caseResult{workload: wlSteady, payload: payloadSize}
	table, pub := "outbox_"+f.id+"_"+tag, "pub_"+f.id+"_"+tag
	var objs []object
	defer func() {
		if !o.keep {
			f.drop(objs...)
		}
	}()
	for _, mk := range []func() (object, error){
		func() (object, error) { return f.createTable(ctx, table) },
		func() (object, error) { return f.createPublication(ctx, pub, table) },
	} {
		obj, err := mk()
		if err != nil {
			return nil, err
		}
		objs = append(objs, obj)
	}
	insert := fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload, event_type) SELECT k, p::jsonb, 'order.created' FROM unnest($1::text[], $2::text[]) AS u(k, p)`, table)
	logTS := "LogAppendTime"
	for _, rate := range o.rates {
		slot, topic := fmt.Sprintf("slot_%s_%s_%d", f.id, tag, rate), fmt.Sprintf("topic_%s_%s_%d", f.id, tag, rate)
		// Created now, after the previous rates' writes: the slot starts at
		// the current WAL position and decodes only this rate's events.
		so, err := f.createSlot(ctx, slot)
		if err != nil {
			return nil, err
		}
		to, err := f.createTopic(ctx, topic, map[string]*string{"message.timestamp.type": &logTS})
		if err != nil {
			return nil, err
		}
		logf("steady %d B: %d events/s for %d s (%d writers, %d per transaction) into %s, walpost on %s → %s",
			payloadSize, rate, o.steadySeconds, o.steadyWriters, o.steadyTxnSize, table, slot, topic)
		r, err := e.runSteadyRate(ctx, table, pub, slot, topic, insert, rate, payloadSize)
		if err != nil {
			return nil, fmt.Errorf("%d events/s: %w", rate, err)
		}
		logf("steady %d B, %d events/s: achieved %.0f events/s, latency p50 %s p99 %s max %s, commit→visible (read_committed) p50 %s p99 %s, walpost %.2f CPU s / 1M, peak RSS %.1f MiB",
			payloadSize, rate, r.achieved, fmtMs(r.lat.p50), fmtMs(r.lat.p99), fmtMs(r.lat.max), fmtMs(r.vis.p50), fmtMs(r.vis.p99), r.cpuSecs/float64(r.events)*1e6, float64(r.hwmKiB)/1024)
		c.steady = append(c.steady, r)
		if !o.keep {
			f.drop(so, to)
		}
	}
	if err := f.pool.QueryRow(ctx, fmt.Sprintf(`SELECT coalesce(avg(octet_length(payload::text)), 0)::float8 FROM %s`, table)).Scan(&c.backlog.avgPayload); err != nil {
		return nil, err
	}
	return c, nil
}

func (e *env) runSteadyRate(ctx context.Context, table, pub, slot, topic, insert string, rate, payloadSize int) (steadyResult, error) {
	f, o := e.f, e.o
	res := steadyResult{mode: deliveryMode(), rate: rate, events: rate * o.steadySeconds, walsndSecs: -1, commits: -1}
	env, _ := f.walpostEnv(table, pub, slot, topic)
	p, err := startWalpost(e.walpostBin, env, "")
	if err != nil {
		return res, err
	}
	// Writing starts once walpost streams from the slot.
	deadline := time.Now().Add(60 * time.Second)
	walsndPID := 0
	for walsndPID == 0 {
		if err := p.exited(); err != nil {
			return res, p.fail(err)
		}
		if time.Now().After(deadline) {
			return res, p.fail(errors.New("walpost did not start streaming within 60 s"))
		}
		if pid, ok := f.walsenderPID(ctx, slot); ok {
			walsndPID = pid
			break
		}
		select {
		case <-ctx.Done():
			return res, p.fail(ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	cpu0, err := procCPU(p.pid())
	if err != nil {
		return res, p.fail(err)
	}
	walsnd0, werr := procCPU(walsndPID)
	busy0, kafka0 := machineBusy(), f.kafkaCPU()

	// Each Kafka transaction writes one checkpoint record and one commit
	// marker to the checkpoint topic's single partition.
	cp0, cperr := int64(0), errors.New("at-least-once")
	if exactlyOnce() {
		cp0, cperr = f.endOffsetSum(ctx, checkpointTopic())
	}
	prefix := fmt.Sprintf("%s-%d-%d", f.id, payloadSize, rate)
	live, err := f.watchVisible(ctx, topic, prefix, res.events)
	if err != nil {
		return res, p.fail(err)
	}
	defer live.stop()
	commitAt, ws, err := e.paceWriters(ctx, insert, prefix, res.events, rate, payloadSize)
	if err != nil {
		return res, p.fail(fmt.Errorf("writers: %w", err))
	}
	res.writeDur, res.maxLate = ws.lastCommit.Sub(ws.start), ws.maxLate
	// The last transaction is due one transaction's share of the schedule
	// before the end: divide by the scheduled duration unless the writers
	// took longer.
	res.achieved = float64(res.events) / max(res.writeDur, time.Duration(o.steadySeconds)*time.Second).Seconds()
	endLSN, err := f.currentLSN(ctx)
	if err != nil {
		return res, p.fail(err)
	}
	if _, err := f.waitConfirmed(ctx, p, slot, endLSN, nil); err != nil {
		return res, p.fail(err)
	}
	res.tail = time.Since(ws.lastCommit)
	res.busySecs, res.kafkaSecs = machineBusy()-busy0, since(kafka0, f.kafkaCPU())
	if werr == nil {
		if w1, err := procCPU(walsndPID); err == nil {
			res.walsndSecs = w1 - walsnd0
		}
	}
	cpu1, err := procCPU(p.pid())
	if err != nil {
		return res, p.fail(err)
	}
	res.cpuSecs = cpu1 - cpu0
	if res.rssKiB, res.hwmKiB, err = procMem(p.pid()); err != nil {
		return res, p.fail(err)
	}
	if cperr == nil {
		if cp1, err := f.endOffsetSum(ctx, checkpointTopic()); err == nil {
			res.commits = (cp1 - cp0) / 2
		}
	}
	if _, err := p.stop(); err != nil {
		return res, err
	}
	if !exactlyOnce() {
		// End offsets count transaction markers in exactly-once mode;
		// there the live consumer's count below is the check.
		n, err := f.endOffsetSum(ctx, topic)
		if err != nil {
			return res, fmt.Errorf("list end offsets: %w", err)
		}
		if n != int64(res.events) {
			return res, fmt.Errorf("topic %s holds %d records, want %d", topic, n, res.events)
		}
	}
	if res.vis, err = live.latencies(commitAt, 2*time.Minute); err != nil {
		return res, err
	}
	res.lat, err = f.consumeLatencies(ctx, topic, prefix, commitAt)
	return res, err
}

// checkpointTopic is walpost's kafka.checkpoint_topic in the benchmark.
func checkpointTopic() string {
	if t := os.Getenv("WALPOST_KAFKA_CHECKPOINT_TOPIC"); t != "" {
		return t
	}
	return config.Default().Kafka.CheckpointTopic
}

// exactlyOnce reports whether walpost runs with delivery.mode exactly-once.
func exactlyOnce() bool { return os.Getenv("WALPOST_DELIVERY_MODE") == config.ExactlyOnce }

// deliveryMode is walpost's delivery mode in this run.
func deliveryMode() string {
	if exactlyOnce() {
		return config.ExactlyOnce
	}
	return config.AtLeastOnce
}

// visibleWatch is a live read_committed consumer of a steady rate's topic:
// seenAt[i] is the wall clock in µs when event i first arrived.
type visibleWatch struct {
	seenAt []int64
	dups   int
	err    error
	done   chan struct{} // closed when the consumer returned
	cancel context.CancelFunc
}

// watchVisible starts reading topic (from its start, read_committed) for
// the events keyed prefix-0 … prefix-(events-1).
func (f *fixture) watchVisible(ctx context.Context, topic, prefix string, events int) (*visibleWatch, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(20*time.Millisecond))
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	w := &visibleWatch{seenAt: make([]int64, events), done: make(chan struct{}), cancel: cancel}
	keyPrefix := prefix + "-"
	go func() {
		defer close(w.done)
		defer cl.Close()
		for seen := 0; seen < events; {
			fs := cl.PollFetches(cctx)
			if cctx.Err() != nil {
				return
			}
			now := time.Now().UnixMicro()
			fs.EachError(func(_ string, _ int32, err error) { w.err = errors.Join(w.err, err) })
			fs.EachRecord(func(r *kgo.Record) {
				rest, ok := strings.CutPrefix(string(r.Key), keyPrefix)
				i, err := strconv.Atoi(rest)
				if !ok || err != nil || i < 0 || i >= events {
					w.err = errors.Join(w.err, fmt.Errorf("topic %s: unexpected key %q", topic, r.Key))
					return
				}
				if w.seenAt[i] != 0 {
					w.dups++
					return
				}
				w.seenAt[i] = now
				seen++
			})
			if w.err != nil {
				return
			}
		}
	}()
	return w, nil
}

func (w *visibleWatch) stop() { w.cancel(); <-w.done }

// latencies waits up to timeout for every event, then returns commit →
// visible per event; a duplicate fails in exactly-once mode.
func (w *visibleWatch) latencies(commitAt []int64, timeout time.Duration) (latency, error) {
	select {
	case <-w.done:
	case <-time.After(timeout):
		w.stop()
	}
	var lat latency
	if w.err != nil {
		return lat, w.err
	}
	us := make([]int64, 0, len(commitAt))
	for i, at := range w.seenAt {
		if at == 0 {
			return lat, fmt.Errorf("the read_committed consumer did not receive event %d of %d within %s", i, len(commitAt), timeout)
		}
		us = append(us, at-commitAt[i])
	}
	lat.dups = w.dups
	if exactlyOnce() && w.dups > 0 {
		return lat, fmt.Errorf("%d duplicate records read with read_committed in exactly-once mode", w.dups)
	}
	return summarize(us, lat), nil
}

type writeStats struct {
	start, lastCommit time.Time
	maxLate           time.Duration
}

// paceWriters writes events rows at rate events/s in transactions of
// o.steadyTxnSize (one multi-row INSERT each) from o.steadyWriters
// connections. Transaction j is due at start + j·txnSize/rate and writer w
// takes the transactions j ≡ w (mod writers): the offered rate is exact and
// evenly spread, not bursty per second. A writer that falls behind starts
// its next transaction at once (the lag shows as maxLate and as an
// achieved rate below the offered one). commitAt[i] is the wall clock in µs
// right after the COMMIT of event i returned.
func (e *env) paceWriters(ctx context.Context, insert, prefix string, events, rate, payloadSize int) ([]int64, writeStats, error) {
	f, writers, txnSize := e.f, e.o.steadyWriters, e.o.steadyTxnSize
	commitAt := make([]int64, events)
	txns := (events + txnSize - 1) / txnSize
	interval := float64(time.Second) * float64(txnSize) / float64(rate)
	var ws writeStats
	var mu sync.Mutex
	abort := false // written before ready is closed, read after
	conns := make(chan error, writers)
	ready := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := f.pool.Acquire(ctx)
			if err == nil {
				// Prepared before the clock starts (Exec of the same text
				// uses it), so the first transaction pays no extra round
				// trip.
				if _, err = conn.Conn().Prepare(ctx, insert, insert); err != nil {
					conn.Release()
				}
			}
			conns <- err
			if err != nil {
				return
			}
			defer conn.Release()
			<-ready
			if abort {
				return
			}
			keys, payloads := make([]string, 0, txnSize), make([]string, 0, txnSize)
			var late time.Duration
			var last time.Time
			for j := w; j < txns; j += writers {
				due := ws.start.Add(time.Duration(float64(j) * interval))
				if d := time.Until(due); d > 0 {
					time.Sleep(d)
				} else {
					late = max(late, -d)
				}
				keys, payloads = keys[:0], payloads[:0]
				lo, hi := j*txnSize, min((j+1)*txnSize, events)
				for i := lo; i < hi; i++ {
					keys = append(keys, eventKey(prefix, i))
					payloads = append(payloads, payload(i, payloadSize))
				}
				if _, err := conn.Exec(ctx, insert, keys, payloads); err != nil {
					errs <- err
					return
				}
				last = time.Now()
				us := last.UnixMicro()
				for i := lo; i < hi; i++ {
					commitAt[i] = us
				}
			}
			mu.Lock()
			ws.maxLate = max(ws.maxLate, late)
			if last.After(ws.lastCommit) {
				ws.lastCommit = last
			}
			mu.Unlock()
		}()
	}
	var connErr error
	for w := 0; w < writers; w++ {
		connErr = errors.Join(connErr, <-conns)
	}
	abort = connErr != nil // the writers that connected return at once
	ws.start = time.Now().Add(50 * time.Millisecond)
	close(ready)
	wg.Wait()
	close(errs)
	if err := errors.Join(connErr, <-errs); err != nil {
		return nil, ws, err
	}
	return commitAt, ws, nil
}

// consumeLatencies reads topic from the start and returns the distribution
// of broker append time − commit time over its records.
func (f *fixture) consumeLatencies(ctx context.Context, topic, prefix string, commitAt []int64) (latency, error) {
	var lat latency
	opts := []kgo.Opt{kgo.SeedBrokers(f.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200 * time.Millisecond)}
	if exactlyOnce() {
		// Aborted transactions' records would count as duplicates.
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return lat, err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	seen := make([]bool, len(commitAt))
	us := make([]int64, 0, len(commitAt))
	keyPrefix := prefix + "-"
	for len(us) < len(commitAt) {
		fs := cl.PollFetches(cctx)
		if err := cctx.Err(); err != nil {
			return lat, fmt.Errorf("consumed %d of %d records of %s: %w", len(us), len(commitAt), topic, err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if ferr != nil {
			return lat, ferr
		}
		var rerr error
		fs.EachRecord(func(r *kgo.Record) {
			if rerr != nil {
				return
			}
			if r.Attrs.TimestampType() != 1 {
				rerr = fmt.Errorf("topic %s: record timestamp type %d, want 1 (LogAppendTime)", topic, r.Attrs.TimestampType())
				return
			}
			rest, ok := strings.CutPrefix(string(r.Key), keyPrefix)
			i, err := strconv.Atoi(rest)
			if !ok || err != nil || i < 0 || i >= len(commitAt) {
				rerr = fmt.Errorf("topic %s: unexpected key %q", topic, r.Key)
				return
			}
			if seen[i] {
				lat.dups++
				return
			}
			seen[i] = true
			us = append(us, r.Timestamp.UnixMicro()-commitAt[i])
		})
		if rerr != nil {
			return lat, rerr
		}
		if lat.dups > 0 {
			return lat, fmt.Errorf("topic %s: %d duplicate records", topic, lat.dups)
		}
	}
	return summarize(us, lat), nil
}

// summarize sets lat's count, percentiles (nearest rank) and CDF from us,
// in µs.
func summarize(us []int64, lat latency) latency {
	slices.Sort(us)
	pct := func(p float64) time.Duration {
		i := int(p*float64(len(us))+0.999999) - 1
		return time.Duration(us[max(0, min(i, len(us)-1))]) * time.Microsecond
	}
	lat.n = len(us)
	if lat.n > 0 {
		lat.p50, lat.p99, lat.min, lat.max = pct(0.50), pct(0.99), time.Duration(us[0])*time.Microsecond, time.Duration(us[len(us)-1])*time.Microsecond
		lat.cdf = make([]time.Duration, cdfSteps+1)
		for i := range lat.cdf {
			lat.cdf[i] = pct(float64(i) / cdfSteps)
		}
	}
	return lat
}

func fmtMs(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
}
