package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

type report struct {
	opts       options
	machine    machine
	cases      []*caseResult
	passEnv    []string
	loadBefore string
	loadAfter  string
	ncpu       int
	produce    string // producerSettings of this run
	dbzSkip    string
	ceilSkip   string     // why the decode ceiling did not run
	charts     chartFiles // drawn beside the results file, linked at its top
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return -1
	}
	v = slices.Clone(v)
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// med is the median of the values pick takes from the rounds; a negative
// value (unknown) makes the median unknown.
func (c *caseResult) med(pick func(roundResult) float64) float64 {
	v := make([]float64, 0, len(c.rounds))
	for _, x := range c.rounds {
		f := pick(x)
		if f < 0 {
			return -1
		}
		v = append(v, f)
	}
	return median(v)
}

func (c *caseResult) hasRaw() bool { return len(c.rounds) > 0 && c.rounds[0].raw != nil }

func (c *caseResult) hasCeiling() bool { return len(c.rounds) > 0 && c.rounds[0].ceiling != nil }

func (c *caseResult) hasStream() bool { return len(c.rounds) > 0 && c.rounds[0].stream != nil }

// streamCPU is the stream-alone baseline's median CPU seconds, -1 when off.
func (c *caseResult) streamCPU() float64 {
	if !c.hasStream() {
		return -1
	}
	return c.med(func(x roundResult) float64 { return x.stream.cpuSecs })
}

// rawCPU is the raw producer's median CPU seconds, -1 when off.
func (c *caseResult) rawCPU() float64 {
	if !c.hasRaw() {
		return -1
	}
	return c.med(func(x roundResult) float64 { return x.raw.cpuSecs })
}

// Medians of the drain cases.
func (c *caseResult) baseWall() float64 {
	return c.med(func(x roundResult) float64 { return x.base.wall.Seconds() })
}
func (c *caseResult) ceilWall() float64 {
	if !c.hasCeiling() {
		return -1
	}
	return c.med(func(x roundResult) float64 { return x.ceiling.wall.Seconds() })
}
func (c *caseResult) wpWall() float64 {
	return c.med(func(x roundResult) float64 { return x.wp.wall.Seconds() })
}
func (c *caseResult) rawWall() float64 {
	if !c.hasRaw() {
		return -1
	}
	return c.med(func(x roundResult) float64 { return x.raw.wall.Seconds() })
}
func (c *caseResult) wpCPU() float64 {
	return c.med(func(x roundResult) float64 { return x.wp.cpuSecs })
}

// wpPeakKiB is walpost's largest VmHWM in the case.
func (c *caseResult) wpPeakKiB() int64 {
	var hwm int64
	for _, x := range c.rounds {
		hwm = max(hwm, x.wp.hwmKiB)
	}
	for _, s := range c.steady {
		hwm = max(hwm, s.hwmKiB)
	}
	return hwm
}

func (c *caseResult) title() string {
	name := map[string]string{
		wlDrain:  "backlog drain",
		wlBigTxn: "one big transaction",
		wlSteady: "steady rate",
	}[c.workload]
	return fmt.Sprintf("%s (`%s`), ~%d-byte payloads", name, c.workload, c.payload)
}

// others returns the cores used by other processes during a drain.
func others(busy float64, wall time.Duration, reader, walsnd, kafka float64) string {
	if walsnd < 0 || kafka < 0 {
		return "?"
	}
	return fmt.Sprintf("%.2f", max(busy-reader-walsnd-kafka, 0)/wall.Seconds())
}

func mib(kib int64) string { return fmt.Sprintf("%.1f MiB", float64(kib)/1024) }

// perM formats CPU seconds per million of n events ("–" when unknown).
func perM(secs float64, n int) string {
	if secs < 0 || n <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", secs/float64(n)*1e6)
}

// perMSplit is perM of a total with its user part ("3.29 (user 2.61)").
func perMSplit(secs, user float64, n int) string {
	if secs < 0 || user < 0 || n <= 0 {
		return perM(secs, n)
	}
	return fmt.Sprintf("%s (user %s)", perM(secs, n), perM(user, n))
}

func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// summary is the short table printed while the run goes on.
func (c *caseResult) summary() string {
	var b strings.Builder
	if c.workload == wlSteady {
		c.writeSteady(&b)
	} else {
		c.writeBacklogTable(&b, "", "")
	}
	return b.String()
}

// writeBacklogTable writes the medians table; a case's reason for not
// running Debezium or the decode ceiling is left out when it is the run's
// (globalSkip, globalCeilSkip), which the notes state once.
func (c *caseResult) writeBacklogTable(b *strings.Builder, globalSkip, globalCeilSkip string) {
	bl := c.backlog
	n := bl.events
	nf := float64(n)
	mbps := func(wall float64) string {
		if wall <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f", bl.payloadBytes()/wall/1e6)
	}
	rate := func(wall float64) float64 {
		if wall <= 0 {
			return -1
		}
		return nf / wall
	}
	rateS := func(wall float64) string {
		if wall <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.0f", nf/wall)
	}
	wpWall := c.wpWall()
	wpRate := rate(wpWall)
	b.WriteString("| reader | time | events/s | MB/s (payload) | walpost ÷ this (events/s) | client CPU s / 1M events | walsender CPU s / 1M events | Kafka broker CPU s / 1M events | client peak RSS |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	baseWall := c.baseWall()
	fmt.Fprintf(b, "| pg_recvlogical → /dev/null (slot read floor) | %.2f s | %s | %s | %s | %s | %s | – | – |\n",
		baseWall, rateS(baseWall), mbps(baseWall), ratio(wpRate, rate(baseWall)),
		perM(c.med(func(x roundResult) float64 { return x.base.cpuSecs }), n),
		perM(c.med(func(x roundResult) float64 { return x.base.walsndSecs }), n))
	if c.hasCeiling() {
		w := c.ceilWall()
		fmt.Fprintf(b, "| decode ceiling: pg_recvlogical, row filter emits nothing | %.2f s | %s | %s | %s | %s | %s | – | – |\n",
			w, rateS(w), mbps(w), ratio(wpRate, rate(w)),
			perM(c.med(func(x roundResult) float64 { return x.ceiling.cpuSecs }), n),
			perM(c.med(func(x roundResult) float64 { return x.ceiling.walsndSecs }), n))
	}
	if c.hasRaw() {
		rawWall := c.rawWall()
		var hwm, ready int64
		for _, x := range c.rounds {
			hwm, ready = max(hwm, x.raw.hwmKiB), max(ready, x.raw.readyRSSKiB)
		}
		fmt.Fprintf(b, "| raw produce: walpost's sink, same records, no PostgreSQL | %.2f s | %s | %s | %s | %s | – | %s | %s (%s before the clock: the pre-built events) |\n",
			rawWall, rateS(rawWall), mbps(rawWall), ratio(wpRate, rate(rawWall)),
			perMSplit(c.rawCPU(), c.med(func(x roundResult) float64 { return x.raw.userSecs }), n),
			perM(c.med(func(x roundResult) float64 { return x.raw.kafkaSecs }), n), mib(hwm), mib(ready))
	}
	if c.hasStream() {
		w := c.med(func(x roundResult) float64 { return x.stream.wall.Seconds() })
		var hwm int64
		for _, x := range c.rounds {
			hwm = max(hwm, x.stream.hwmKiB)
		}
		fmt.Fprintf(b, "| walpost's stream alone: read, decode, checkpoint; no Kafka | %.2f s | %s | %s | %s | %s | %s | – | %s |\n",
			w, rateS(w), mbps(w), ratio(wpRate, rate(w)),
			perMSplit(c.streamCPU(), c.med(func(x roundResult) float64 { return x.stream.userSecs }), n),
			perM(c.med(func(x roundResult) float64 { return x.stream.walsndSecs }), n), mib(hwm))
	}
	if d := c.dbz; d != nil {
		w, fl := d.wall.Seconds(), d.firstToLast.Seconds()
		fmt.Fprintf(b, "| Debezium, JVM start → all in Kafka (1 run) | %.2f s | %s | %s | %s | %s | %s | %s | %s |\n",
			w, rateS(w), mbps(w), ratio(wpRate, rate(w)), perM(d.cpuSecs, n), perM(d.walsndSecs, n), perM(d.kafkaSecs, n), mib(d.peakRSSKiB))
		fmt.Fprintf(b, "| Debezium, first record → all in Kafka | %.2f s | %s | %s | %s | | | | |\n",
			fl, rateS(fl), mbps(fl), ratio(wpRate, rate(fl)))
	}
	fmt.Fprintf(b, "| **walpost → Kafka, acknowledged and confirmed** | %.2f s | %s | %s | 1.00 | %s | %s | %s | %s |\n",
		wpWall, rateS(wpWall), mbps(wpWall), perMSplit(c.wpCPU(), c.med(func(x roundResult) float64 { return x.wp.userSecs }), n),
		perM(c.med(func(x roundResult) float64 { return x.wp.walsndSecs }), n),
		perM(c.med(func(x roundResult) float64 { return x.wp.kafkaSecs }), n), mib(c.wpPeakKiB()))
	if !c.hasCeiling() && c.ceilNote != "" && c.ceilNote != globalCeilSkip {
		fmt.Fprintf(b, "\nDecode ceiling: not run (%s).\n", c.ceilNote)
	}
	if c.dbz == nil && c.dbzNote != "" && c.dbzNote != globalSkip {
		fmt.Fprintf(b, "\nDebezium: %s.\n", c.dbzNote)
	}
}

func (c *caseResult) writeRounds(b *strings.Builder) {
	n := c.backlog.events
	b.WriteString("| round | order | pg_recvlogical | decode ceiling | raw produce | stream alone, CPU s / 1M | walpost confirmed (all in Kafka) | walpost ÷ pg_recvlogical | walpost ÷ decode ceiling | walpost CPU s / 1M | walpost peak RSS | other processes, cores: pg_recvlogical / ceiling / raw / stream / walpost |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, x := range c.rounds {
		ceil, ceilRatio, ceilOthers := "–", "–", "–"
		if y := x.ceiling; y != nil {
			ceil = fmt.Sprintf("%.2f s", y.wall.Seconds())
			ceilRatio = ratio(y.wall.Seconds(), x.wp.wall.Seconds())
			ceilOthers = others(y.busySecs, y.wall, y.cpuSecs, y.walsndSecs, y.kafkaSecs)
		}
		raw, rawOthers := "–", "–"
		if x.raw != nil {
			raw = fmt.Sprintf("%.2f s", x.raw.wall.Seconds())
			rawOthers = others(x.raw.busySecs, x.raw.wall, x.raw.cpuSecs, 0, x.raw.kafkaSecs)
		}
		stream, streamOthers := "–", "–"
		if s := x.stream; s != nil {
			stream = fmt.Sprintf("%.2f s, %s", s.wall.Seconds(), perMSplit(s.cpuSecs, s.userSecs, n))
			streamOthers = others(s.busySecs, s.wall, s.cpuSecs, s.walsndSecs, s.kafkaSecs)
		}
		fmt.Fprintf(b, "| %d | %s | %.2f s | %s | %s | %s | %.2f s (≈%.2f s) | %.2f | %s | %s | %s | %s / %s / %s / %s / %s |\n",
			i+1, strings.Join(x.order, " → "), x.base.wall.Seconds(), ceil, raw, stream, x.wp.wall.Seconds(), x.wp.acked.Seconds(),
			x.base.wall.Seconds()/x.wp.wall.Seconds(), ceilRatio, perMSplit(x.wp.cpuSecs, x.wp.userSecs, n), mib(x.wp.hwmKiB),
			others(x.base.busySecs, x.base.wall, x.base.cpuSecs, x.base.walsndSecs, x.base.kafkaSecs), ceilOthers, rawOthers, streamOthers,
			others(x.wp.busySecs, x.wp.wall, x.wp.cpuSecs, x.wp.walsndSecs, x.wp.kafkaSecs))
	}
}

func (c *caseResult) writeSteady(b *strings.Builder) {
	b.WriteString("| offered events/s | achieved events/s | MB/s (payload) | events | commit→append p50 | p99 | max | commit→visible p50 | p99 | last commit → confirmed | walpost CPU s / 1M events | walsender CPU s / 1M | Kafka broker CPU s / 1M | walpost peak RSS | writers' worst lag | Kafka commits/s |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range c.steady {
		commits := "–"
		if s.commits >= 0 {
			commits = fmt.Sprintf("%.0f", float64(s.commits)/max(s.writeDur, time.Second).Seconds())
		}
		fmt.Fprintf(b, "| %d | %.0f | %.2f | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			s.rate, s.achieved, s.achieved*c.backlog.avgPayload/1e6, s.events, fmtMs(s.lat.p50), fmtMs(s.lat.p99), fmtMs(s.lat.max), fmtMs(s.vis.p50), fmtMs(s.vis.p99),
			fmtMs(s.tail), perM(s.cpuSecs, s.events), perM(s.walsndSecs, s.events), perM(s.kafkaSecs, s.events), mib(s.hwmKiB), fmtMs(s.maxLate), commits)
	}
}

func (r report) markdown() string {
	o := r.opts
	var b strings.Builder
	fmt.Fprintf(&b, "# walpost benchmark, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "Workloads %s, payloads of ~%s bytes (jsonb; text-like filler), topics with %d partitions, replication factor 1. ",
		strings.Join(o.workloads, ", "), joinInts(o.payloads, " and ~"), o.partitions)
	backlogs := slices.Contains(o.workloads, wlDrain) || slices.Contains(o.workloads, wlBigTxn)
	if backlogs {
		rounds := fmt.Sprintf("medians of %d rounds", o.rounds)
		if o.rounds == 1 {
			rounds = "1 round"
		}
		raw := ""
		if o.raw {
			raw = " (and the raw producer from the same rows)"
		}
		dbz := " Debezium drains it once, from its own slot and publication."
		if r.dbzSkip != "" {
			dbz = " Debezium not run (" + r.dbzSkip + ")."
		}
		fmt.Fprintf(&b, "Drain and bigtxn: %s; each round drains the same backlog from fresh slots%s with every reader, one after the other, rotating which goes first.%s ", rounds, raw, dbz)
	}
	if slices.Contains(o.workloads, wlSteady) {
		fmt.Fprintf(&b, "Steady: %d s per rate, %d paced writers, %d events per transaction, walpost live on a fresh slot.", o.steadySeconds, o.steadyWriters, o.steadyTxnSize)
	}
	b.WriteString("\n")
	r.linkCharts(&b)

	for _, c := range r.cases {
		fmt.Fprintf(&b, "\n## %s\n\n", c.title())
		bl := c.backlog
		switch c.workload {
		case wlDrain, wlBigTxn:
			shape := fmt.Sprintf("transactions of %d (COPY, %d writers)", bl.txnSize, bl.writers)
			if c.workload == wlBigTxn {
				shape = "one transaction (COPY, one writer)"
			}
			fmt.Fprintf(&b, "%d events in %s, avg payload %.0f bytes, %.1f MiB of WAL, written in %.1f s before any slot was read (WAL %s → %s).\n\n",
				bl.events, shape, bl.avgPayload, float64(bl.walBytes)/(1<<20), bl.writeDur.Seconds(), bl.startLSN, bl.endLSN)
			c.writeBacklogTable(&b, r.dbzSkip, r.ceilSkip)
			if d := c.dbz; d != nil {
				fmt.Fprintf(&b, "\nDebezium: JVM start → first record in Kafka %.1f s; its peak RSS is the Connect JVM's (-Xmx2G); walpost ÷ Debezium on peak RSS: %s.\n",
					d.startup.Seconds(), ratio(float64(c.wpPeakKiB()), float64(d.peakRSSKiB)))
			}
			b.WriteString("\nRounds:\n\n")
			c.writeRounds(&b)
		case wlSteady:
			fmt.Fprintf(&b, "Avg payload %.0f bytes. Latency = the record's broker append time (topic with message.timestamp.type=LogAppendTime) − the wall clock right after the writer's COMMIT returned; same machine clock, Kafka timestamps have millisecond resolution, so each latency is ±1 ms.\n\n", bl.avgPayload)
			c.writeSteady(&b)
		}
	}

	b.WriteString("\n## Targets (issue 7)\n\n")
	r.writeTargets(&b)

	b.WriteString("\n## Notes\n\n")
	b.WriteString("- events/s: N ÷ time. MB/s: payload bytes (payload::text) ÷ time, 10⁶ bytes. walpost ÷ this: walpost's median events/s ÷ that reader's (above 1: walpost faster).\n")
	if backlogs {
		b.WriteString("- walpost: time from process start (start-up included, ~0.1 s) until the slot's confirmed_flush_lsn ≥ the backlog's end LSN (polled every 50 ms): every event produced, acknowledged by Kafka and confirmed to PostgreSQL; \"all in Kafka\" is when the topic's end offsets first summed to N (polled every 250 ms). Every round ended with exactly N records in the topic and walpost exiting 0 after SIGTERM.\n")
		b.WriteString("- pg_recvlogical: `--start --plugin=pgoutput -o proto_version=1 -o publication_names=… -f /dev/null --no-loop --endpos=<end LSN>` on its own slot; it exits by itself at the end LSN.\n")
		if r.ceilSkip != "" {
			fmt.Fprintf(&b, "- decode ceiling: not run (%s).\n", r.ceilSkip)
		} else {
			fmt.Fprintf(&b, "- decode ceiling: pg_recvlogical as above on its own slot, created with the others before the backlog, through a second publication of the same table `WHERE (%s)`, never true: its walsender reads and decodes the same WAL and sends no change (nor, on PostgreSQL 15+, an empty transaction). Its time is what the walsender costs at least, whatever the reader; walpost ÷ decode ceiling (its time ÷ walpost's, as for pg_recvlogical) is how close walpost comes to it.\n", emptyRowFilter)
		}
	}
	if o.raw && backlogs {
		fmt.Fprintf(&b, "- raw produce: a child process loads the backlog's rows (read once from the table, in key order), builds the outbox events in memory, then, clock started, produces them through `kafka.New` built from walpost's effective configuration (%s) and the same in-flight bounds, to a fresh topic, until the last acknowledgement. No PostgreSQL in the loop: the ceiling of walpost's Kafka side on this machine. Its CPU counts from the first produce; its peak RSS includes the pre-built events.\n", r.produce)
	}
	if o.stream && backlogs {
		b.WriteString("- stream alone: a child process runs walpost's pipeline (`forwarder.New` from walpost's configuration, as `walpost run` does: read, decode, events built, the isolator, checkpoint tracking, status updates) on its own slot with walpost's in-flight bounds, one CPU and memory limit, into `sink.Discard`, which acknowledges each event as soon as it is handed on: no Kafka. Time and CPU (utime+stime, start-up included) until every event up to the end LSN was released. With the raw producer it splits walpost's CPU into a PostgreSQL half and a Kafka half.\n")
	}
	if r.dbzSkip != "" {
		fmt.Fprintf(&b, "- Debezium: not run (%s).\n", r.dbzSkip)
	} else if backlogs {
		b.WriteString("- Debezium: Kafka Connect standalone with the PostgreSQL connector and the Outbox Event Router (idempotent producer, acks=all, key = idempotency_key), its own slot and publication on the same table, started once per workload and payload after the rounds. Full time from the JVM's start until its topic held N records, and first record → N (polled every 100 ms); CPU (start-up included) and peak RSS of the JVM. The target compares with the first → N rate, the one kinder to Debezium.\n")
	}
	b.WriteString("- Client CPU: utime+stime of the reader process; \"(user …)\" is the utime part, the rest is kernel time, mostly the loopback TCP of the replication stream. Walsender CPU: the PostgreSQL backend decoding for that slot (`pg_replication_slots.active_pid`), not in the client column. Kafka broker: the JVM of the local stack (.stack/kafka.pid). Other processes: the machine's CPU time during the drain (/proc/stat) minus reader, walsender and broker, in cores; well above 0 means something else competed for the cores and that round is noisy (`?` when unknown).\n")
	if slices.Contains(o.workloads, wlSteady) {
		b.WriteString("- Steady: each rate runs its own walpost process on a slot created just before it; the writers start once walpost streams. Transaction j is due at start + j × transaction size ÷ rate (absolute deadlines spread over the writers), one multi-row INSERT each; the writers' worst lag is how late a transaction started behind its schedule. walpost's CPU is counted from the first write until the slot confirmed the last one; peak RSS is that process's VmHWM.\n")
	}
	if len(r.passEnv) > 0 {
		fmt.Fprintf(&b, "- walpost settings from the environment: `%s`.\n", strings.Join(r.passEnv, "`, `"))
	} else {
		b.WriteString("- walpost settings: defaults (WALPOST_LOG_LEVEL=info, HTTP off).\n")
	}
	if o.perfOut != "" {
		b.WriteString("- `perf record` was attached to walpost during the drain rounds (the numbers include its overhead).\n")
	}

	b.WriteString("\n## Machine\n\n")
	m := r.machine
	fmt.Fprintf(&b, "- CPU: %s, nproc %d; memory %s; kernel %s\n", m.cpuModel, m.nproc, m.memory, m.kernel)
	fmt.Fprintf(&b, "- PostgreSQL %s, Kafka %s, both on this machine (local stack, loopback)\n", m.pg, m.kafka)
	fmt.Fprintf(&b, "- load average (1/5/15 min) before the first workload %s, after the last %s (well above 0 before means other processes shared the CPUs)\n", r.loadBefore, r.loadAfter)
	fmt.Fprintf(&b, "- walpost commit %s; harness built with %s\n", m.commit, m.goVer)
	return b.String()
}

// linkCharts links the charts drawn beside this file, as images.
func (r report) linkCharts(b *strings.Builder) {
	if r.charts.throughput != "" {
		fmt.Fprintf(b, "\nEvents/s of every reader in every round (the rounds tables below):\n\n![events/s per reader and round](%s)\n", r.charts.throughput)
	}
	if r.charts.latency != "" {
		fmt.Fprintf(b, "\nCommit→visible latency of the steady workload, empirical CDF per delivery mode and rate:\n\n![commit→visible latency CDF per delivery mode and rate](%s)\n", r.charts.latency)
	}
}

func joinInts(v []int, sep string) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, sep)
}

const (
	met         = "met"
	notMet      = "**not met**"
	notMeasured = "not measured"
)

func status(ok bool) string {
	if ok {
		return met
	}
	return notMet
}

// writeTargets states where each target of issue 7 stands in this run.
func (r report) writeTargets(b *strings.Builder) {
	b.WriteString("| target | measured | status |\n|---|---|---|\n")
	line := func(target, measured, st string) { fmt.Fprintf(b, "| %s | %s | %s |\n", target, measured, st) }
	var drains []*caseResult
	for _, c := range r.cases {
		if c.workload == wlDrain {
			drains = append(drains, c)
		}
	}

	// 1. Drain ≥ 80 % of pg_recvlogical.
	if len(drains) == 0 {
		line("drain ≥ 80 % of pg_recvlogical's rate", "drain not run", notMeasured)
	}
	for _, c := range drains {
		q := c.baseWall() / c.wpWall()
		line(fmt.Sprintf("drain ≥ 80 %% of pg_recvlogical's rate (~%d B)", c.payload), fmt.Sprintf("%.0f %% (%.2f×)", q*100, q), status(q >= 0.8))
	}

	// 2. ≥ 5× Debezium's events/s with ≤ 1/10 of its peak RSS (drain).
	if len(drains) == 0 {
		line("≥ 5× Debezium's events/s with ≤ 1/10 of its peak RSS (drain)", "drain not run", notMeasured)
	}
	for _, c := range drains {
		t := fmt.Sprintf("≥ 5× Debezium's events/s with ≤ 1/10 of its peak RSS (drain, ~%d B)", c.payload)
		d := c.dbz
		if d == nil {
			line(t, "Debezium: "+c.dbzNote, notMeasured)
			continue
		}
		wp := c.wpWall()
		fl, full := d.firstToLast.Seconds()/wp, d.wall.Seconds()/wp
		rss := float64(d.peakRSSKiB) / float64(c.wpPeakKiB())
		line(t, fmt.Sprintf("%.1f× first→last (%.1f× incl. JVM start); walpost's peak RSS 1/%.1f of Debezium's (%s vs %s)",
			fl, full, rss, mib(c.wpPeakKiB()), mib(d.peakRSSKiB)), status(fl >= 5 && rss >= 10))
	}

	// 3. Peak RSS ≤ 64 MiB on every workload.
	var worst *caseResult
	for _, c := range r.cases {
		if worst == nil || c.wpPeakKiB() > worst.wpPeakKiB() {
			worst = c
		}
	}
	if worst == nil {
		line("walpost peak RSS ≤ 64 MiB on every workload", "nothing run", notMeasured)
	} else {
		var per []string
		for _, c := range r.cases {
			per = append(per, fmt.Sprintf("%s %d B %s", c.workload, c.payload, mib(c.wpPeakKiB())))
		}
		m := fmt.Sprintf("max %s (%s, ~%d B); %s", mib(worst.wpPeakKiB()), worst.workload, worst.payload, strings.Join(per, ", "))
		st := status(worst.wpPeakKiB() <= 64*1024)
		if len(r.opts.workloads) < len(allWorkloads) && st == met {
			st = "met on the workloads run"
		}
		line("walpost peak RSS ≤ 64 MiB on every workload", m, st)
	}

	// 4. p99 commit→append ≤ 50 ms at 10k events/s.
	found := false
	for _, c := range r.cases {
		for _, s := range c.steady {
			if s.rate == 10_000 {
				found = true
				line(fmt.Sprintf("p99 commit→append ≤ 50 ms at 10k events/s (~%d B)", c.payload),
					fmt.Sprintf("p99 %s (p50 %s, max %s; achieved %.0f events/s)", fmtMs(s.lat.p99), fmtMs(s.lat.p50), fmtMs(s.lat.max), s.achieved),
					status(s.lat.p99 <= 50*time.Millisecond))
			}
		}
	}
	if !found {
		line("p99 commit→append ≤ 50 ms at 10k events/s", "no steady run at 10000 events/s", notMeasured)
	}

	// 5. ≤ 2 CPU s per million 200-byte events (drain).
	found = false
	for _, c := range drains {
		if c.payload == 200 {
			found = true
			n := c.backlog.events
			cpu := c.wpCPU() / float64(n) * 1e6
			m := fmt.Sprintf("%.2f CPU s / 1M (start-up included)", cpu)
			var parts []string
			if c.hasStream() {
				parts = append(parts, "walpost's stream alone (no Kafka) "+perM(c.streamCPU(), n))
			}
			if c.hasRaw() {
				parts = append(parts, "the raw producer (no PostgreSQL) "+perM(c.rawCPU(), n))
			}
			if len(parts) > 0 {
				m += "; its two halves measured alone in the same rounds: " + strings.Join(parts, ", ")
			}
			line("≤ 2 CPU s per million 200-byte events (drain)", m, status(cpu <= 2))
		}
	}
	if !found {
		line("≤ 2 CPU s per million 200-byte events (drain)", "no drain with 200-byte payloads", notMeasured)
	}
}
