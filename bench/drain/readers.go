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
	"github.com/twmb/franz-go/pkg/kgo"
)

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

// walsenderPID returns the backend holding slot, if any.
func (f *fixture) walsenderPID(ctx context.Context, slot string) (int, bool) {
	var pid *int32
	if err := f.pool.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&pid); err != nil || pid == nil {
		return 0, false
	}
	return int(*pid), true
}

// walsenderCPU returns the CPU seconds so far of the walsender holding
// slot (PostgreSQL runs on this machine in the local stack).
func (f *fixture) walsenderCPU(ctx context.Context, slot string) (float64, bool) {
	pid, ok := f.walsenderPID(ctx, slot)
	if !ok {
		return 0, false
	}
	cpu, err := procCPU(pid)
	return cpu, err == nil
}

// sampleWalsender samples the CPU of the walsender holding slot every 50
// ms, for readers whose walsender ends with them; stop ends the sampling
// and returns the last sample (-1: none).
func (f *fixture) sampleWalsender(ctx context.Context, slot string) (stop func() float64) {
	quit, last := make(chan struct{}), make(chan float64, 1)
	go func() {
		cpu := -1.0
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				last <- cpu
				return
			case <-t.C:
			}
			if c, ok := f.walsenderCPU(ctx, slot); ok {
				cpu = c
			}
		}
	}()
	return func() float64 {
		close(quit)
		return <-last
	}
}

// runRecvlogical drains slot with pg_recvlogical up to endLSN, where it
// exits by itself.
func (f *fixture) runRecvlogical(ctx context.Context, bin, slot, publication string, endLSN pglogrepl.LSN) (baseResult, error) {
	cmd := exec.CommandContext(ctx, bin,
		"-d", f.pgURL, "--slot="+slot, "--start",
		"-o", "proto_version=1", "-o", "publication_names="+publication,
		"--plugin=pgoutput", "-f", "/dev/null", "--no-loop",
		"--endpos="+endLSN.String())
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	busy0, kafka0 := machineBusy(), f.kafkaCPU()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return baseResult{}, err
	}
	stopSampling := f.sampleWalsender(ctx, slot)
	err := cmd.Wait()
	walsnd := stopSampling()
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
	userSecs   float64       // utime of cpuSecs
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
// WALPOST_KAFKA_LINGER=… make bench works), and table, publication, slot
// and topic on top. passed lists the pass-through WALPOST_* settings.
func (f *fixture) walpostEnv(table, publication, slot, topic string) (env, passed []string) {
	own := map[string]string{
		"WALPOST_POSTGRES_URL":         f.pgURL,
		"WALPOST_KAFKA_BROKERS":        strings.Join(f.brokers, ","),
		"WALPOST_POSTGRES_TABLE":       table,
		"WALPOST_POSTGRES_PUBLICATION": publication,
		"WALPOST_POSTGRES_SLOT":        slot,
		"WALPOST_KAFKA_TOPIC":          topic,
		"WALPOST_HTTP_LISTEN":          "",
		"WALPOST_LOG_LEVEL":            "info",
	}
	// The caller's listener is kept (WALPOST_HTTP_LISTEN=127.0.0.1:9391
	// WALPOST_HTTP_PPROF=true profiles a round through /debug/pprof/).
	if l := os.Getenv("WALPOST_HTTP_LISTEN"); l != "" {
		own["WALPOST_HTTP_LISTEN"] = l
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
		if own[k] == "" && k != "WALPOST_HTTP_LISTEN" {
			continue // not chosen yet (the report only wants passed)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+own[k])
	}
	sort.Strings(passed)
	return env, passed
}

// walpostProc is a running `walpost run`.
type walpostProc struct {
	cmd      *exec.Cmd
	logFile  *os.File
	done     chan struct{}
	waitErr  error
	start    time.Time
	stopPerf func()
}

// startWalpost starts `walpost run` with env, its output in a temporary
// log file; perfOut, when set, attaches perf record.
func startWalpost(bin string, env []string, perfOut string) (*walpostProc, error) {
	logFile, err := os.CreateTemp("", "walpost-bench-*.log")
	if err != nil {
		return nil, err
	}
	p := &walpostProc{logFile: logFile, done: make(chan struct{}), stopPerf: func() {}}
	p.cmd = exec.Command(bin, "run")
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.start = time.Now()
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	go func() { p.waitErr = p.cmd.Wait(); close(p.done) }()
	if perfOut != "" {
		p.stopPerf = startPerf(perfOut, p.cmd.Process.Pid)
	}
	return p, nil
}

func (p *walpostProc) pid() int { return p.cmd.Process.Pid }

// fail kills walpost (if it still runs) and returns err with its log tail.
func (p *walpostProc) fail(err error) error {
	p.stopPerf()
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.logFile.Close()
	return fmt.Errorf("%w\nwalpost log %s (tail):\n%s", err, p.logFile.Name(), tail(p.logFile.Name(), 30))
}

// exited reports an early exit.
func (p *walpostProc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("walpost exited early: %v", p.waitErr)
	default:
		return nil
	}
}

// stop sends SIGTERM and waits for the exit; it returns the exit status.
// The log file is removed when walpost exits 0.
func (p *walpostProc) stop() (string, error) {
	p.stopPerf()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		return "", p.fail(errors.New("walpost did not exit within 60 s of SIGTERM"))
	}
	p.logFile.Close()
	if p.waitErr != nil {
		return p.waitErr.Error(), fmt.Errorf("walpost exited with %v after SIGTERM (log %s)", p.waitErr, p.logFile.Name())
	}
	_ = os.Remove(p.logFile.Name())
	return "0", nil
}

// confirmedLSN returns the slot's confirmed_flush_lsn (0 when NULL).
func (f *fixture) confirmedLSN(ctx context.Context, slot string) (pglogrepl.LSN, error) {
	var s *string
	if err := f.pool.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&s); err != nil {
		return 0, fmt.Errorf("read slot %s: %w", slot, err)
	}
	if s == nil {
		return 0, nil
	}
	return pglogrepl.ParseLSN(*s)
}

// waitConfirmed polls every 50 ms until the slot confirms endLSN, calling
// tick first on each poll; it returns the confirmed LSN.
func (f *fixture) waitConfirmed(ctx context.Context, p *walpostProc, slot string, endLSN pglogrepl.LSN, tick func()) (pglogrepl.LSN, error) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-p.done:
			return 0, p.exited()
		case <-t.C:
		}
		if tick != nil {
			tick()
		}
		lsn, err := f.confirmedLSN(ctx, slot)
		if err != nil {
			return 0, err
		}
		if lsn >= endLSN {
			return lsn, nil
		}
	}
}

// runWalpost runs `walpost run` on slot and topic until the slot confirms
// endLSN, samples its CPU and memory, stops it with SIGTERM and checks the
// topic holds exactly want records.
func (f *fixture) runWalpost(ctx context.Context, bin, table, publication, slot, topic string, endLSN pglogrepl.LSN, want int64, perfOut string) (walpostResult, error) {
	var res walpostResult
	env, _ := f.walpostEnv(table, publication, slot, topic)
	busy0, kafka0 := machineBusy(), f.kafkaCPU()
	p, err := startWalpost(bin, env, perfOut)
	if err != nil {
		return res, err
	}
	// The time every record is in Kafka, checked every 250 ms (a metadata
	// round trip is not free; this number is secondary).
	offsetsDue := time.Now()
	tick := func() {
		if res.acked == 0 && time.Now().After(offsetsDue) {
			offsetsDue = time.Now().Add(250 * time.Millisecond)
			if n, err := f.endOffsetSum(ctx, topic); err == nil && n >= want {
				res.acked = time.Since(p.start)
			}
		}
	}
	if res.confirmed, err = f.waitConfirmed(ctx, p, slot, endLSN, tick); err != nil {
		return res, p.fail(err)
	}
	res.wall = time.Since(p.start)
	res.busySecs, res.kafkaSecs = machineBusy()-busy0, since(kafka0, f.kafkaCPU())
	if res.acked == 0 {
		res.acked = res.wall
	}
	res.walsndSecs = -1
	if cpu, ok := f.walsenderCPU(ctx, slot); ok {
		res.walsndSecs = cpu
	}
	if res.cpuSecs, res.userSecs, err = procCPUSplit(p.pid()); err != nil {
		return res, p.fail(err)
	}
	if res.rssKiB, res.hwmKiB, err = procMem(p.pid()); err != nil {
		return res, p.fail(err)
	}
	if res.exitStatus, err = p.stop(); err != nil {
		return res, err
	}
	count := f.endOffsetSum
	if os.Getenv("WALPOST_DELIVERY_MODE") == "exactly-once" {
		// End offsets count the transaction markers too.
		count = func(ctx context.Context, topic string) (int64, error) { return f.committedRecords(ctx, topic, want) }
	}
	if res.records, err = count(ctx, topic); err != nil {
		return res, fmt.Errorf("count the topic's records: %w", err)
	}
	if res.records != want {
		return res, fmt.Errorf("topic %s holds %d records, want %d", topic, res.records, want)
	}
	return res, nil
}

// committedRecords counts the records a read_committed consumer reads
// from topic: until want arrived and a second passed without more, or 2
// minutes.
func (f *fixture) committedRecords(ctx context.Context, topic string, want int64) (int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	var n int64
	for deadline, quiet := time.Now().Add(2*time.Minute), time.Now(); time.Now().Before(deadline); {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		got := int64(fs.NumRecords())
		n += got
		if got > 0 {
			quiet = time.Now()
		}
		if n >= want && time.Since(quiet) > time.Second {
			break
		}
	}
	return n, nil
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
