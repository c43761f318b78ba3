// Command drain is walpost's benchmark harness (make bench).
//
// It measures walpost on three workloads, each with small and large
// payloads, against baselines run in the same process on the same data:
//
//   - drain: a backlog of N outbox events written while nothing reads fresh
//     logical slots, then drained by pg_recvlogical (the floor: the
//     walsender decoding pgoutput for a client that discards the bytes), by
//     pg_recvlogical through a publication whose row filter is never true
//     (the decode ceiling: what the walsender costs at least, decoding
//     every insert and sending none; PostgreSQL 15+), by a raw producer
//     (the same records through walpost's sink with no PostgreSQL in the
//     loop), by walpost's stream alone (read, decode and checkpoint, no
//     Kafka), by `walpost run` to Kafka, each round on its own slot and
//     topic, and once by Debezium (Kafka Connect standalone with the
//     Outbox Event Router) on its own slot and publication;
//   - bigtxn: the same readers on one transaction of 200,000 rows;
//   - steady: walpost running live while paced writers insert at fixed
//     rates, reporting commit→broker-append latency.
//
// Every slot of a backlog is created before the backlog is written, so
// every reader decodes the same WAL. The report (Markdown, also written to
// bench/results/bench-<date>.md) gives medians per reader, ratios to each
// baseline, CPU seconds per million events, peak RSS and where the issue's
// targets stand; SVG charts beside it draw events/s per reader and round and
// the CDF of commit→visible latency (charts.go). See bench/README.md.
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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Workload names, in the order a run executes them.
const (
	wlDrain  = "drain"
	wlBigTxn = "bigtxn"
	wlSteady = "steady"
)

var allWorkloads = []string{wlDrain, wlBigTxn, wlSteady}

type options struct {
	workloads     []string
	payloads      []int
	events        int
	bigTxnEvents  int
	rounds        int
	writers       int
	txnSize       int
	rates         []int
	steadySeconds int
	steadyWriters int
	steadyTxnSize int
	debezium      bool
	raw           bool
	stream        bool
	partitions    int
	walpost       string
	pgBin         string
	outDir        string
	perfOut       string
	timeout       time.Duration
	keep          bool
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

func envBool(name string, def bool) bool {
	v, ok := os.LookupEnv(name)
	if !ok || v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %s=%q is not a boolean (0/1, true/false)\n", name, v)
		os.Exit(2)
	}
	return b
}

// intList parses "2000,10_000,30000", dropping repeats.
func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(strings.ReplaceAll(f, "_", ""))
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		if !slices.Contains(out, n) { // a repeat would reuse its keys and names
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

func workloadList(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		if f == "" {
			continue
		}
		if f == "all" {
			return allWorkloads, nil
		}
		if !slices.Contains(allWorkloads, f) {
			return nil, fmt.Errorf("unknown workload %q (drain, bigtxn, steady, all)", f)
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no workload")
	}
	// Run them in the canonical order whatever order they were given in.
	slices.SortFunc(out, func(a, b string) int { return slices.Index(allWorkloads, a) - slices.Index(allWorkloads, b) })
	return out, nil
}

func main() {
	var o options
	var workloads, payloads, rates, produceOnly, streamOnly string
	// BENCH_PAYLOAD_BYTES (one size) is the knob of the first harness;
	// BENCH_PAYLOADS wins when both are set.
	defPayloads := "200,2048"
	if v := os.Getenv("BENCH_PAYLOAD_BYTES"); v != "" {
		defPayloads = v
	}
	flag.StringVar(&workloads, "workloads", envString("BENCH_WORKLOADS", "drain,bigtxn,steady"), "comma list of workloads: drain, bigtxn, steady, all (BENCH_WORKLOADS)")
	flag.StringVar(&payloads, "payloads", envString("BENCH_PAYLOADS", defPayloads), "comma list of approximate jsonb payload sizes in bytes; every workload runs with each (BENCH_PAYLOADS)")
	flag.IntVar(&o.events, "events", envInt("BENCH_EVENTS", 1_000_000), "drain: backlog size in events (BENCH_EVENTS)")
	flag.IntVar(&o.bigTxnEvents, "bigtxn-events", envInt("BENCH_BIGTXN_EVENTS", 200_000), "bigtxn: rows of the one transaction (BENCH_BIGTXN_EVENTS)")
	flag.IntVar(&o.rounds, "rounds", envInt("BENCH_ROUNDS", 3), "drain, bigtxn: drains of the same backlog by each reader, rotating which goes first (BENCH_ROUNDS)")
	flag.IntVar(&o.writers, "writers", envInt("BENCH_WRITERS", 4), "drain: concurrent writers filling the backlog (BENCH_WRITERS)")
	flag.IntVar(&o.txnSize, "txn-size", envInt("BENCH_TXN_SIZE", 100), "drain: events per transaction, written with COPY (BENCH_TXN_SIZE)")
	flag.StringVar(&rates, "rates", envString("BENCH_RATES", "2000,10000,30000"), "steady: comma list of offered rates in events/s (BENCH_RATES)")
	flag.IntVar(&o.steadySeconds, "steady-seconds", envInt("BENCH_STEADY_SECONDS", 60), "steady: seconds of writing per rate (BENCH_STEADY_SECONDS)")
	flag.IntVar(&o.steadyWriters, "steady-writers", envInt("BENCH_STEADY_WRITERS", 8), "steady: paced writer connections (BENCH_STEADY_WRITERS)")
	flag.IntVar(&o.steadyTxnSize, "steady-txn-size", envInt("BENCH_STEADY_TXN_SIZE", 10), "steady: events per transaction (BENCH_STEADY_TXN_SIZE)")
	flag.BoolVar(&o.debezium, "debezium", envBool("BENCH_DEBEZIUM", true), "drain, bigtxn: run Debezium once per workload and payload (BENCH_DEBEZIUM=0 skips it)")
	flag.BoolVar(&o.raw, "raw-produce", envBool("BENCH_RAW_PRODUCE", true), "drain, bigtxn: run the raw-produce baseline each round (BENCH_RAW_PRODUCE=0 skips it)")
	flag.BoolVar(&o.stream, "stream-alone", envBool("BENCH_STREAM_ALONE", true), "drain, bigtxn: run the stream-alone baseline (walpost's stream, no Kafka) each round (BENCH_STREAM_ALONE=0 skips it)")
	flag.IntVar(&o.partitions, "partitions", envInt("BENCH_PARTITIONS", 3), "partitions of the benchmark topics (BENCH_PARTITIONS)")
	flag.StringVar(&o.walpost, "walpost", envString("BENCH_WALPOST", "bin/walpost"), "walpost binary (BENCH_WALPOST)")
	flag.StringVar(&o.pgBin, "pg-bin", envString("WALPOST_STACK_PG_BIN", ""), "directory holding pg_recvlogical (WALPOST_STACK_PG_BIN; else PATH)")
	flag.StringVar(&o.outDir, "out", envString("BENCH_OUT", "bench/results"), "directory for the result file; empty writes none (BENCH_OUT)")
	flag.StringVar(&o.perfOut, "perf", os.Getenv("BENCH_PERF"), "record walpost with perf record -g during drain/bigtxn rounds into `FILE`.<workload>_<payload>.<round> (BENCH_PERF)")
	flag.DurationVar(&o.timeout, "timeout", 4*time.Hour, "give up after this long")
	flag.BoolVar(&o.keep, "keep", false, "keep the tables, publications, slots and topics")
	flag.StringVar(&produceOnly, "produce-only", "", "internal: the raw-produce child process (a JSON spec)")
	flag.StringVar(&streamOnly, "stream-only", "", "internal: the stream-alone child process (a JSON spec)")
	flag.Parse()

	if streamOnly != "" {
		if err := streamChild(streamOnly); err != nil {
			fmt.Fprintln(os.Stderr, "bench stream-only:", err)
			os.Exit(1)
		}
		return
	}
	if produceOnly != "" {
		if err := produceChild(produceOnly); err != nil {
			fmt.Fprintln(os.Stderr, "bench produce-only:", err)
			os.Exit(1)
		}
		return
	}

	var err error
	if o.workloads, err = workloadList(workloads); err != nil {
		usage("-workloads / BENCH_WORKLOADS: %v", err)
	}
	if o.payloads, err = intList(payloads); err != nil {
		usage("-payloads / BENCH_PAYLOADS: %v", err)
	}
	if o.rates, err = intList(rates); err != nil {
		usage("-rates / BENCH_RATES: %v", err)
	}
	if o.events <= 0 || o.bigTxnEvents <= 0 || o.rounds <= 0 || o.writers <= 0 || o.txnSize <= 0 || o.partitions <= 0 ||
		o.steadySeconds <= 0 || o.steadyWriters <= 0 || o.steadyTxnSize <= 0 {
		usage("-events, -bigtxn-events, -rounds, -writers, -txn-size, -partitions, -steady-seconds, -steady-writers and -steady-txn-size must be positive")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	err = run(ctx, o)
	cancel()
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: FAILED:", err)
		os.Exit(1)
	}
}

func usage(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	os.Exit(2)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// env is what every workload needs: binaries, the fixture, the producer
// settings of the raw baseline and Debezium's class path.
type env struct {
	o           options
	f           *fixture
	walpostBin  string
	recvlogical string
	self        string // this binary, re-executed for the raw producer
	produce     string // producerSettings of this run
	dbzLibs     string // "" when Debezium does not run
	dbzSkip     string // why Debezium does not run
	ceilSkip    string // why the decode ceiling does not run
}

func run(ctx context.Context, o options) error {
	pgURL := os.Getenv("WALPOST_POSTGRES_URL")
	brokersEnv := os.Getenv("WALPOST_KAFKA_BROKERS")
	if pgURL == "" || brokersEnv == "" {
		return errors.New("WALPOST_POSTGRES_URL / WALPOST_KAFKA_BROKERS unset: run scripts/stack.sh up and source .stack/env (scripts/bench.sh does both)")
	}
	needsBacklog := slices.Contains(o.workloads, wlDrain) || slices.Contains(o.workloads, wlBigTxn)
	e, err := newEnv(o, needsBacklog)
	if err != nil {
		return err
	}

	f := newFixture(pgURL, strings.Split(brokersEnv, ","), o.partitions)
	e.f = f

	// --- set-up -------------------------------------------------------
	logf("walpost migrate")
	if out, err := exec.CommandContext(ctx, e.walpostBin, "migrate").CombinedOutput(); err != nil {
		return fmt.Errorf("walpost migrate: %v\n%s", err, out)
	}
	pcfg, err := pgxpool.ParseConfig(pgURL)
	if err != nil {
		return err
	}
	pcfg.MaxConns = int32(max(o.writers, o.steadyWriters) + 4)
	if f.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return err
	}
	defer f.pool.Close()
	if f.kcl, err = kgo.NewClient(kgo.SeedBrokers(f.brokers...)); err != nil {
		return err
	}
	defer f.kcl.Close()
	f.adm = kadm.NewClient(f.kcl)
	if f.workDir, err = os.MkdirTemp("", "walpost-bench-"); err != nil {
		return err
	}
	if !o.keep {
		defer f.cleanup()
		defer os.RemoveAll(f.workDir)
	}

	if err := e.prepareBaselines(ctx, needsBacklog); err != nil {
		return err
	}

	loadBefore := loadAvg()
	if l, err := strconv.ParseFloat(strings.Fields(loadBefore + " 0")[0], 64); err == nil && l > 0.7 {
		logf("WARNING: load average %s before the run: other processes compete for the CPUs and the numbers will be noisy", loadBefore)
	}

	// --- workloads ----------------------------------------------------
	cases, err := e.runCases(ctx)
	if err != nil {
		return err
	}

	// --- report -------------------------------------------------------
	_, passEnv := f.walpostEnv("", "", "", "")
	rep := report{
		opts: o, machine: describeMachine(ctx, f), cases: cases, passEnv: passEnv,
		loadBefore: loadBefore, loadAfter: loadAvg(), ncpu: runtime.NumCPU(),
		produce: e.produce, dbzSkip: e.dbzSkip, ceilSkip: e.ceilSkip,
	}
	if o.outDir == "" {
		fmt.Println(rep.markdown())
		return nil
	}
	path, md, err := writeResult(o.outDir, rep)
	fmt.Println(md)
	if err != nil {
		return err
	}
	logf("wrote %s", path)
	return nil
}

// newEnv finds the binaries: walpost, pg_recvlogical when a backlog is read, and this one.
func newEnv(o options, needsBacklog bool) (*env, error) {
	e := &env{o: o}
	var err error
	if e.walpostBin, err = filepath.Abs(o.walpost); err != nil {
		return nil, err
	}
	if _, err := os.Stat(e.walpostBin); err != nil {
		return nil, fmt.Errorf("walpost binary: %w (make build)", err)
	}
	if needsBacklog {
		e.recvlogical = "pg_recvlogical"
		if o.pgBin != "" {
			e.recvlogical = filepath.Join(o.pgBin, "pg_recvlogical")
		}
		if e.recvlogical, err = exec.LookPath(e.recvlogical); err != nil {
			return nil, fmt.Errorf("pg_recvlogical: %w (set WALPOST_STACK_PG_BIN)", err)
		}
	}
	if e.self, err = os.Executable(); err != nil {
		return nil, fmt.Errorf("own executable (for the raw producer): %w", err)
	}
	return e, nil
}

// prepareBaselines decides which baselines run: the decode ceiling, the raw producer's and stream's settings, and Debezium.
func (e *env) prepareBaselines(ctx context.Context, needsBacklog bool) error {
	var err error
	// The decode ceiling needs publication row filters (PostgreSQL 15+).
	if needsBacklog {
		if e.ceilSkip, err = e.f.rowFilterSkip(ctx); err != nil {
			return err
		}
		if e.ceilSkip != "" {
			logf("WARNING: no decode ceiling: %s", e.ceilSkip)
		}
	}
	// The raw producer uses walpost's effective producer settings (its
	// defaults plus any WALPOST_* override in the environment), the
	// stream alone its in-flight bounds.
	if needsBacklog && (e.o.raw || e.o.stream) {
		cfg, err := walpostConfig()
		if err != nil {
			return err
		}
		e.produce = producerSettings(cfg)
		if e.o.raw {
			logf("raw produce baseline with walpost's settings: %s", e.produce)
		}
	}
	switch {
	case !needsBacklog:
	case !e.o.debezium:
		e.dbzSkip = "BENCH_DEBEZIUM=0"
	default:
		logf("installing Debezium (scripts/debezium.sh install)")
		if e.dbzLibs, err = debeziumLibs(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			e.dbzSkip = "not installed: " + firstLine(err.Error())
			logf("WARNING: Debezium unavailable, continuing without it: %v", err)
		}
	}
	return nil
}

// runCases runs every workload with every payload size.
func (e *env) runCases(ctx context.Context) ([]*caseResult, error) {
	var cases []*caseResult
	for _, wl := range e.o.workloads {
		for _, p := range e.o.payloads {
			var c *caseResult
			var err error
			switch wl {
			case wlDrain, wlBigTxn:
				c, err = e.runBacklogCase(ctx, wl, p)
			case wlSteady:
				c, err = e.runSteadyCase(ctx, p)
			}
			if err != nil {
				return nil, fmt.Errorf("%s, %d-byte payloads: %w", wl, p, err)
			}
			cases = append(cases, c)
			logf("%s, %d-byte payloads done:\n%s", wl, p, c.summary())
		}
	}
	return cases, nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}
