// Command drain is walpost's backlog-drain benchmark (make bench).
//
// It writes a backlog of N outbox events while nothing reads fresh logical
// slots, then drains one slot with pg_recvlogical (the floor: the walsender
// decoding pgoutput for a client that discards the bytes) and another with
// `walpost run` to Kafka, and reports events/s, the ratio of the two,
// walpost's CPU seconds per million events and its peak RSS. Each round
// uses its own pair of slots (all created before the backlog is written),
// so rounds repeat the same drain; the report gives medians. See
// bench/README.md.
//
// It is a benchmark, not a test: it needs the local stack (scripts/stack.sh
// up; . .stack/env) and is run by scripts/bench.sh.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

type options struct {
	events       int
	rounds       int
	writers      int
	txnSize      int
	payloadBytes int
	partitions   int
	walpost      string
	pgBin        string
	outDir       string
	perfOut      string
	timeout      time.Duration
	keep         bool
}

func envInt(name string, def int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(strings.ReplaceAll(v, "_", ""))
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s=%q is not an integer\n", name, v)
			os.Exit(2)
		}
		return n
	}
	return def
}

func envString(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func main() {
	var o options
	flag.IntVar(&o.events, "events", envInt("BENCH_EVENTS", 200_000), "backlog size in events (BENCH_EVENTS)")
	flag.IntVar(&o.rounds, "rounds", envInt("BENCH_ROUNDS", 3), "drains of the same backlog by each reader, alternating which goes first (BENCH_ROUNDS)")
	flag.IntVar(&o.writers, "writers", envInt("BENCH_WRITERS", 4), "concurrent writers filling the backlog (BENCH_WRITERS)")
	flag.IntVar(&o.txnSize, "txn-size", envInt("BENCH_TXN_SIZE", 100), "events per transaction, written with COPY (BENCH_TXN_SIZE)")
	flag.IntVar(&o.payloadBytes, "payload-bytes", envInt("BENCH_PAYLOAD_BYTES", 200), "approximate jsonb payload size (BENCH_PAYLOAD_BYTES)")
	flag.IntVar(&o.partitions, "partitions", envInt("BENCH_PARTITIONS", 3), "partitions of the benchmark topics (BENCH_PARTITIONS)")
	flag.StringVar(&o.walpost, "walpost", envString("BENCH_WALPOST", "bin/walpost"), "walpost binary (BENCH_WALPOST)")
	flag.StringVar(&o.pgBin, "pg-bin", envString("WALPOST_STACK_PG_BIN", ""), "directory holding pg_recvlogical (WALPOST_STACK_PG_BIN; else PATH)")
	flag.StringVar(&o.outDir, "out", envString("BENCH_OUT", "bench/results"), "directory for the result file; empty writes none (BENCH_OUT)")
	flag.StringVar(&o.perfOut, "perf", os.Getenv("BENCH_PERF"), "record walpost with `perf record -g` into this file, .N per round when rounds > 1 (BENCH_PERF)")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Minute, "give up after this long")
	flag.BoolVar(&o.keep, "keep", false, "keep the table, publication, slots and topics")
	flag.Parse()
	if o.events <= 0 || o.rounds <= 0 || o.writers <= 0 || o.txnSize <= 0 || o.partitions <= 0 {
		fmt.Fprintln(os.Stderr, "bench: -events, -rounds, -writers, -txn-size and -partitions must be positive")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	err := run(ctx, o)
	cancel()
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: FAILED:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

func run(ctx context.Context, o options) error {
	pgURL := os.Getenv("WALPOST_POSTGRES_URL")
	brokersEnv := os.Getenv("WALPOST_KAFKA_BROKERS")
	if pgURL == "" || brokersEnv == "" {
		return errors.New("WALPOST_POSTGRES_URL / WALPOST_KAFKA_BROKERS unset: run scripts/stack.sh up and source .stack/env (scripts/bench.sh does both)")
	}
	walpostBin, err := filepath.Abs(o.walpost)
	if err != nil {
		return err
	}
	if _, err := os.Stat(walpostBin); err != nil {
		return fmt.Errorf("walpost binary: %w (make build)", err)
	}
	recvlogical := "pg_recvlogical"
	if o.pgBin != "" {
		recvlogical = filepath.Join(o.pgBin, "pg_recvlogical")
	}
	if recvlogical, err = exec.LookPath(recvlogical); err != nil {
		return fmt.Errorf("pg_recvlogical: %w (set WALPOST_STACK_PG_BIN)", err)
	}

	f := newFixture(pgURL, strings.Split(brokersEnv, ","), o.rounds)

	// --- set-up -------------------------------------------------------
	logf("walpost migrate")
	if out, err := exec.CommandContext(ctx, walpostBin, "migrate").CombinedOutput(); err != nil {
		return fmt.Errorf("walpost migrate: %v\n%s", err, out)
	}
	if f.pool, err = pgxpool.New(ctx, pgURL); err != nil {
		return err
	}
	defer f.pool.Close()
	if f.kcl, err = kgo.NewClient(kgo.SeedBrokers(f.brokers...)); err != nil {
		return err
	}
	defer f.kcl.Close()
	f.adm = kadm.NewClient(f.kcl)
	if !o.keep {
		defer f.cleanup()
	}
	if err := f.setup(ctx, o.partitions); err != nil {
		return err
	}
	logf("table %s, publication %s, %d rounds of slots %s_* and topics %s_* (%d partitions)",
		f.table, f.publication, o.rounds, f.rounds[0].slotBase, f.rounds[0].topic, o.partitions)

	// --- backlog ------------------------------------------------------
	loadBefore := loadAvg()
	if l, err := strconv.ParseFloat(strings.Fields(loadBefore + " 0")[0], 64); err == nil && l > 0.7 {
		logf("WARNING: load average %s before the run: other processes compete for the CPUs and the numbers will be noisy", loadBefore)
	}
	bl, err := f.writeBacklog(ctx, o)
	if err != nil {
		return fmt.Errorf("write backlog: %w", err)
	}
	logf("backlog written in %s (%.0f events/s); WAL %s → %s (%.1f MiB), avg payload %.0f bytes",
		bl.writeDur.Round(time.Millisecond), float64(o.events)/bl.writeDur.Seconds(), bl.startLSN, bl.endLSN, float64(bl.walBytes)/(1<<20), bl.avgPayload)

	// --- rounds: each reader drains its own slot ------------------------
	results := make([]roundResult, o.rounds)
	for i := range f.rounds {
		rn := f.rounds[i]
		res := &results[i]
		res.walpostFirst = i%2 == 1 // alternate, so order effects cancel out
		runBase := func() error {
			logf("round %d: pg_recvlogical --endpos=%s on %s", i+1, bl.endLSN, rn.slotBase)
			var err error
			if res.base, err = f.runRecvlogical(ctx, recvlogical, rn.slotBase, bl.endLSN); err != nil {
				return fmt.Errorf("round %d: pg_recvlogical: %w", i+1, err)
			}
			logf("round %d: baseline drained in %s (%.0f events/s)", i+1, res.base.wall.Round(time.Millisecond), float64(o.events)/res.base.wall.Seconds())
			return nil
		}
		runWP := func() error {
			logf("round %d: walpost run until %s confirms %s", i+1, rn.slotWalpost, bl.endLSN)
			perf := o.perfOut
			if perf != "" && o.rounds > 1 {
				perf += "." + strconv.Itoa(i+1)
			}
			var err error
			if res.wp, err = f.runWalpost(ctx, walpostBin, rn, bl.endLSN, int64(o.events), perf); err != nil {
				return fmt.Errorf("round %d: walpost: %w", i+1, err)
			}
			logf("round %d: walpost drained and confirmed in %s (%.0f events/s)", i+1, res.wp.wall.Round(time.Millisecond), float64(o.events)/res.wp.wall.Seconds())
			return nil
		}
		steps := []func() error{runBase, runWP}
		if res.walpostFirst {
			steps = []func() error{runWP, runBase}
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return err
			}
		}
	}

	// --- report -------------------------------------------------------
	_, passEnv := f.walpostEnv(f.rounds[0])
	rep := report{
		opts: o, machine: describeMachine(ctx, f), backlog: bl, rounds: results, passEnv: passEnv,
		loadBefore: loadBefore, loadAfter: loadAvg(), ncpu: runtime.NumCPU(),
	}
	md := rep.markdown()
	fmt.Println(md)
	if o.outDir != "" {
		path, err := writeResult(o.outDir, md)
		if err != nil {
			return err
		}
		logf("wrote %s", path)
	}
	return nil
}
