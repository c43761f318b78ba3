package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kadm"
)

type roundResult struct {
	walpostFirst bool
	base         baseResult
	wp           walpostResult
}

// --- pg_recvlogical ---------------------------------------------------

type baseResult struct {
	wall       time.Duration
	cpuSecs    float64 // pg_recvlogical's own user+system time
	walsndSecs float64 // its walsender's CPU, last 50 ms sample (-1: unknown)
	busySecs   float64 // CPU seconds the whole machine was busy meanwhile
	kafkaSecs  float64 // CPU seconds of the Kafka broker meanwhile (-1: unknown)
}

// kafkaCPU returns the local stack's Kafka broker CPU seconds so far, or -1.
func (f *fixture) kafkaCPU() float64 {
	if f.kafkaPID <= 0 {
		return -1
	}
	cpu, err := procCPU(f.kafkaPID)
	if err != nil {
		return -1
	}
	return cpu
}

// since returns now-then for CPU counters where -1 means unknown.
func since(then, now float64) float64 {
	if then < 0 || now < 0 {
		return -1
	}
	return now - then
}

// walsenderCPU returns the CPU seconds so far of the walsender holding
// slot (PostgreSQL runs on this machine in the local stack).
func (f *fixture) walsenderCPU(ctx context.Context, slot string) (float64, bool) {
	var pid *int32
	if err := f.pool.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&pid); err != nil || pid == nil {
		return 0, false
	}
	cpu, err := procCPU(int(*pid))
	return cpu, err == nil
}

// runRecvlogical drains slot with pg_recvlogical up to endLSN, where it
// exits by itself.
func (f *fixture) runRecvlogical(ctx context.Context, bin, slot string, endLSN pglogrepl.LSN) (baseResult, error) {
	cmd := exec.CommandContext(ctx, bin,
		"-d", f.pgURL, "--slot="+slot, "--start",
		"-o", "proto_version=1", "-o", "publication_names="+f.publication,
		"--plugin=pgoutput", "-f", "/dev/null", "--no-loop",
		"--endpos="+endLSN.String())
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	busy0, kafka0 := machineBusy(), f.kafkaCPU()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return baseResult{}, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	walsnd := -1.0
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var err error
wait:
	for {
		select {
		case err = <-done:
			break wait
		case <-tick.C:
			if cpu, ok := f.walsenderCPU(ctx, slot); ok {
				walsnd = cpu
			}
		}
	}
	wall := time.Since(start)
	busy, kafka := machineBusy()-busy0, since(kafka0, f.kafkaCPU())
	if err != nil {
		return baseResult{}, fmt.Errorf("%v: %s", err, out.String())
	}
	st := cmd.ProcessState
	return baseResult{wall: wall, cpuSecs: (st.UserTime() + st.SystemTime()).Seconds(), walsndSecs: walsnd, busySecs: busy, kafkaSecs: kafka}, nil
}

// --- walpost ----------------------------------------------------------

type walpostResult struct {
	wall       time.Duration // start until confirmed_flush_lsn ≥ end LSN
	acked      time.Duration // start until the topic held every event
	cpuSecs    float64       // utime+stime just before SIGTERM
	walsndSecs float64       // its walsender's CPU just before SIGTERM (-1: unknown)
	busySecs   float64       // CPU seconds the whole machine was busy meanwhile
	kafkaSecs  float64       // CPU seconds of the Kafka broker meanwhile (-1: unknown)
	rssKiB     int64         // VmRSS just before SIGTERM
	hwmKiB     int64         // VmHWM (peak RSS) just before SIGTERM
	records    int64         // sum of end offsets
	confirmed  pglogrepl.LSN
	exitStatus string
}

// walpostEnv returns the environment for walpost: the caller's, with
// WALPOST_* variables the harness does not set passed through (so
// WALPOST_KAFKA_LINGER=… make bench works), and the round's on top.
func (f *fixture) walpostEnv(rn roundNames) (env, passed []string) {
	own := map[string]string{
		"WALPOST_POSTGRES_URL":         f.pgURL,
		"WALPOST_KAFKA_BROKERS":        strings.Join(f.brokers, ","),
		"WALPOST_POSTGRES_TABLE":       f.table,
		"WALPOST_POSTGRES_PUBLICATION": f.publication,
		"WALPOST_POSTGRES_SLOT":        rn.slotWalpost,
		"WALPOST_KAFKA_TOPIC":          rn.topic,
		"WALPOST_HTTP_LISTEN":          "",
		"WALPOST_LOG_LEVEL":            "info",
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, mine := own[k]; mine {
			continue
		}
		if strings.HasPrefix(k, "WALPOST_") && !strings.HasPrefix(k, "WALPOST_STACK_") {
			passed = append(passed, kv)
		}
		env = append(env, kv)
	}
	keys := make([]string, 0, len(own))
	for k := range own {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+own[k])
	}
	sort.Strings(passed)
	return env, passed
}

// runWalpost runs `walpost run` on the round's slot and topic until the
// slot confirms endLSN, samples its CPU and memory, stops it with SIGTERM
// and checks the topic holds exactly want records.
func (f *fixture) runWalpost(ctx context.Context, bin string, rn roundNames, endLSN pglogrepl.LSN, want int64, perfOut string) (walpostResult, error) {
	var res walpostResult
	logFile, err := os.CreateTemp("", "walpost-bench-*.log")
	if err != nil {
		return res, err
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "run")
	cmd.Env, _ = f.walpostEnv(rn)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	done := make(chan struct{})
	fail := func(err error) (walpostResult, error) {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
			<-done
		}
		return res, fmt.Errorf("%w\nwalpost log %s (tail):\n%s", err, logFile.Name(), tail(logFile.Name(), 30))
	}

	busy0, kafka0 := machineBusy(), f.kafkaCPU()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return res, err
	}
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(done) }()
	stopPerf := func() {}
	if perfOut != "" {
		stopPerf = startPerf(perfOut, cmd.Process.Pid)
	}
	defer stopPerf()

	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	offsetsDue := time.Now()
	for {
		select {
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-done:
			return fail(fmt.Errorf("walpost exited early: %v", waitErr))
		case <-tick.C:
		}
		// The time every record is in Kafka, checked every 250 ms (a
		// metadata round trip is not free; this number is secondary).
		if res.acked == 0 && time.Now().After(offsetsDue) {
			offsetsDue = time.Now().Add(250 * time.Millisecond)
			if n, err := f.endOffsetSum(ctx, rn.topic); err == nil && n >= want {
				res.acked = time.Since(start)
			}
		}
		var s *string
		err := f.pool.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, rn.slotWalpost).Scan(&s)
		if err != nil {
			return fail(fmt.Errorf("read slot: %w", err))
		}
		if s == nil {
			continue
		}
		lsn, err := pglogrepl.ParseLSN(*s)
		if err != nil {
			return fail(err)
		}
		if lsn >= endLSN {
			res.wall = time.Since(start)
			res.busySecs, res.kafkaSecs = machineBusy()-busy0, since(kafka0, f.kafkaCPU())
			res.confirmed = lsn
			break
		}
	}
	if res.acked == 0 {
		res.acked = res.wall
	}
	res.walsndSecs = -1
	if cpu, ok := f.walsenderCPU(ctx, rn.slotWalpost); ok {
		res.walsndSecs = cpu
	}
	pid := cmd.Process.Pid
	if res.cpuSecs, err = procCPU(pid); err != nil {
		return fail(err)
	}
	if res.rssKiB, res.hwmKiB, err = procMem(pid); err != nil {
		return fail(err)
	}
	stopPerf()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		res.exitStatus = "0"
		if waitErr != nil {
			res.exitStatus = waitErr.Error()
		}
	case <-time.After(60 * time.Second):
		return fail(errors.New("walpost did not exit within 60 s of SIGTERM"))
	}
	if res.records, err = f.endOffsetSum(ctx, rn.topic); err != nil {
		return res, fmt.Errorf("list end offsets: %w", err)
	}
	if res.records != want {
		return res, fmt.Errorf("topic %s holds %d records, want %d (walpost log %s)", rn.topic, res.records, want, logFile.Name())
	}
	_ = os.Remove(logFile.Name())
	return res, nil
}

func (f *fixture) endOffsetSum(ctx context.Context, topic string) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	offs, err := f.adm.ListEndOffsets(cctx, topic)
	if err != nil {
		return 0, err
	}
	if err := offs.Error(); err != nil {
		return 0, err
	}
	var n int64
	offs.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n, nil
}
