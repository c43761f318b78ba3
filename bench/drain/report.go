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
	backlog    backlog
	rounds     []roundResult
	passEnv    []string
	loadBefore string
	loadAfter  string
	ncpu       int
}

// median of the values f picks from the rounds.
func (r report) median(f func(roundResult) float64) float64 {
	v := make([]float64, len(r.rounds))
	for i, x := range r.rounds {
		v[i] = f(x)
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// others returns the cores used by other processes during a drain.
func others(busy float64, wall time.Duration, reader, walsnd, kafka float64) string {
	if walsnd < 0 || kafka < 0 {
		return "?"
	}
	return fmt.Sprintf("%.2f", max(busy-reader-walsnd-kafka, 0)/wall.Seconds())
}

func (r report) markdown() string {
	n := float64(r.opts.events)
	perM := func(secs float64) string {
		if secs < 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", secs/n*1e6)
	}
	baseWall := r.median(func(x roundResult) float64 { return x.base.wall.Seconds() })
	wpWall := r.median(func(x roundResult) float64 { return x.wp.wall.Seconds() })
	baseRate, wpRate := n/baseWall, n/wpWall
	var hwm int64
	for _, x := range r.rounds {
		hwm = max(hwm, x.wp.hwmKiB)
	}

	var b strings.Builder
	bl := r.backlog
	fmt.Fprintf(&b, "# walpost drain benchmark, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "Backlog: %d events in transactions of %d (COPY, %d writers), avg payload %.0f bytes (jsonb as text), event_type set; %.1f MiB of WAL; topics with %d partitions, replication factor 1. ",
		r.opts.events, r.opts.txnSize, r.opts.writers, bl.avgPayload, float64(bl.walBytes)/(1<<20), r.opts.partitions)
	fmt.Fprintf(&b, "Medians of %d rounds; each round drains the same backlog from fresh slots with both readers, one after the other.\n\n", len(r.rounds))
	b.WriteString("| reader | drain time | events/s | vs pg_recvlogical | client CPU s / 1M events | walsender CPU s / 1M events | Kafka broker CPU s / 1M events | client peak RSS |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| pg_recvlogical → /dev/null (baseline) | %.2f s | %.0f | 1.00 | %s | %s | – | – |\n",
		baseWall, baseRate, perM(r.median(func(x roundResult) float64 { return x.base.cpuSecs })),
		perM(r.median(func(x roundResult) float64 { return x.base.walsndSecs })))
	fmt.Fprintf(&b, "| walpost → Kafka, drained and confirmed | %.2f s | %.0f | %.2f | %s | %s | %s | %.1f MiB |\n",
		wpWall, wpRate, wpRate/baseRate, perM(r.median(func(x roundResult) float64 { return x.wp.cpuSecs })),
		perM(r.median(func(x roundResult) float64 { return x.wp.walsndSecs })),
		perM(r.median(func(x roundResult) float64 { return x.wp.kafkaSecs })), float64(hwm)/1024)

	b.WriteString("\n### Rounds\n\n")
	b.WriteString("| round | first | pg_recvlogical | walpost confirmed (all in Kafka) | ratio | walpost CPU s / 1M | walpost peak RSS | other processes, cores: baseline / walpost |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|\n")
	for i, x := range r.rounds {
		first := "pg_recvlogical"
		if x.walpostFirst {
			first = "walpost"
		}
		fmt.Fprintf(&b, "| %d | %s | %.2f s | %.2f s (≈%.2f s) | %.2f | %s | %.1f MiB | %s / %s |\n",
			i+1, first, x.base.wall.Seconds(), x.wp.wall.Seconds(), x.wp.acked.Seconds(),
			x.base.wall.Seconds()/x.wp.wall.Seconds(), perM(x.wp.cpuSecs), float64(x.wp.hwmKiB)/1024,
			others(x.base.busySecs, x.base.wall, x.base.cpuSecs, x.base.walsndSecs, x.base.kafkaSecs),
			others(x.wp.busySecs, x.wp.wall, x.wp.cpuSecs, x.wp.walsndSecs, x.wp.kafkaSecs))
	}

	b.WriteString("\n### Notes\n\n")
	b.WriteString("- walpost's drain time runs from process start (it includes start-up) until the slot's confirmed_flush_lsn ≥ the end LSN (polled every 50 ms); \"all in Kafka\" is when the topic's end offsets first summed to N (polled every 250 ms). ")
	fmt.Fprintf(&b, "Every round ended with end offsets summing to exactly %d and walpost exiting 0 after SIGTERM.\n", r.opts.events)
	fmt.Fprintf(&b, "- pg_recvlogical: `--start --plugin=pgoutput -o proto_version=1 -o publication_names=… -f /dev/null --no-loop --endpos=%s`; it exits by itself at the end LSN.\n", bl.endLSN)
	b.WriteString("- Client CPU: utime+stime of the reader process (walpost sampled just before SIGTERM, start-up included). Walsender CPU: the PostgreSQL backend decoding for that slot (`pg_replication_slots.active_pid`), not included in the client column. Kafka broker: the JVM of the local stack (.stack/kafka.pid). Other processes: CPU time used on the machine during the drain (/proc/stat) minus reader, walsender and broker, divided by the drain time; well above 0 means something else competed for the cores and that round is noisy.\n")
	fmt.Fprintf(&b, "- Backlog written in %.1f s (%.0f events/s) before any slot was read; WAL %s → %s.\n", bl.writeDur.Seconds(), n/bl.writeDur.Seconds(), bl.startLSN, bl.endLSN)
	if len(r.passEnv) > 0 {
		fmt.Fprintf(&b, "- walpost settings from the environment: `%s`.\n", strings.Join(r.passEnv, "`, `"))
	} else {
		b.WriteString("- walpost settings: defaults (WALPOST_LOG_LEVEL=info, HTTP off).\n")
	}
	if r.opts.perfOut != "" {
		b.WriteString("- `perf record` was attached to walpost during this run (the numbers include its overhead).\n")
	}

	b.WriteString("\n### Machine\n\n")
	m := r.machine
	fmt.Fprintf(&b, "- CPU: %s, nproc %d; memory %s; kernel %s\n", m.cpuModel, m.nproc, m.memory, m.kernel)
	fmt.Fprintf(&b, "- PostgreSQL %s, Kafka %s, both on this machine (local stack, loopback)\n", m.pg, m.kafka)
	fmt.Fprintf(&b, "- load average (1/5/15 min) before writing the backlog %s, after the drains %s (well above 0 before means other processes shared the CPUs)\n", r.loadBefore, r.loadAfter)
	fmt.Fprintf(&b, "- walpost commit %s; harness built with %s\n", m.commit, m.goVer)
	return b.String()
}
