package main

// The raw-produce baseline: the backlog's records produced through
// walpost's own Kafka sink (kafka.New from the configuration `walpost run`
// reads)
// to a fresh topic, with no PostgreSQL in the loop. It runs in a child
// process (this binary with -produce-only) so its CPU time and peak RSS are
// read from /proc like walpost's. The child loads the rows (dumped once per
// backlog by the parent), builds the outbox events in memory, reports
// "ready", and starts its clock when the parent answers "go"; it stops the
// clock at the last acknowledgement.

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/kafkaconf"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// producerSettings describes what shapes walpost's producer and its
// in-flight bounds in this run: walpost's configuration (its defaults plus
// any WALPOST_* override in the environment), read with config.Load as
// `walpost run` reads it.
func producerSettings(cfg *config.Config) string {
	return fmt.Sprintf("linger %s, compression %s, max_message_bytes %d, max in flight %d events / %d bytes, acks=all, idempotent",
		cfg.Kafka.Linger, cfg.Kafka.Compression, cfg.Kafka.MaxMessageBytes, cfg.Pipeline.MaxInFlightEvents, cfg.Pipeline.MaxInFlightBytes)
}

// walpostConfig is walpost's configuration from this process's
// environment, which the children inherit and walpost gets too.
func walpostConfig() (*config.Config, error) {
	cfg, err := config.Load(nil, config.NeedNothing)
	if err != nil {
		return nil, fmt.Errorf("walpost's configuration from the environment: %w", err)
	}
	return cfg, nil
}

// produceSpec is the child's job, passed as JSON in -produce-only.
type produceSpec struct {
	Rows      string   `json:"rows"`   // file written by dumpRows
	Events    int      `json:"events"` // rows in it
	Topic     string   `json:"topic"`
	Brokers   []string `json:"brokers"`
	CommitLSN string   `json:"commit_lsn"` // for the commit_lsn header (the backlog's end LSN)
}

// produceReport is the child's "done" line.
type produceReport struct {
	Events  int    `json:"events"`
	WallNs  int64  `json:"wall_ns"` // first Produce → last acknowledgement
	Failed  int    `json:"failed"`
	FirstEr string `json:"first_error,omitempty"`
}

type rawResult struct {
	wall         time.Duration
	cpuSecs      float64 // CPU of the child between "go" and "done"
	userSecs     float64 // utime of cpuSecs
	readyRSSKiB  int64   // VmRSS at "go": the pre-built events and the client
	hwmKiB       int64   // VmHWM at the end
	busySecs     float64
	kafkaSecs    float64
	records      int64
	loadDuration time.Duration // loading the rows and building the events, before the clock
}

// runRawProduce re-executes this binary as the raw producer of the rows in
// rowsFile to topic and checks the topic holds exactly want records.
func (e *env) runRawProduce(ctx context.Context, rowsFile, topic string, commitLSN pglogrepl.LSN, want int64) (rawResult, error) {
	var res rawResult
	loadStart := time.Now()
	c, err := e.startChild(ctx, "-produce-only", produceSpec{Rows: rowsFile, Events: int(want), Topic: topic, Brokers: e.f.brokers, CommitLSN: commitLSN.String()})
	if err != nil {
		return res, fmt.Errorf("raw producer: %w", err)
	}
	fail := func(err error) (rawResult, error) {
		c.kill()
		return res, fmt.Errorf("raw producer: %w", err)
	}
	if _, err := c.next("ready"); err != nil {
		return fail(err)
	}
	res.loadDuration = time.Since(loadStart)
	pid := c.cmd.Process.Pid
	cpu0, user0, err := procCPUSplit(pid)
	if err != nil {
		return fail(err)
	}
	if res.readyRSSKiB, _, err = procMem(pid); err != nil {
		return fail(err)
	}
	busy0, kafka0 := machineBusy(), e.f.kafkaCPU()
	if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
		return fail(err)
	}
	var rep produceReport
	if err := c.done(&rep); err != nil {
		return fail(err)
	}
	res.busySecs, res.kafkaSecs = machineBusy()-busy0, since(kafka0, e.f.kafkaCPU())
	cpu1, user1, err := procCPUSplit(pid)
	if err != nil {
		return fail(err)
	}
	res.cpuSecs, res.userSecs = cpu1-cpu0, user1-user0
	if _, res.hwmKiB, err = procMem(pid); err != nil {
		return fail(err)
	}
	if err := c.finish(); err != nil {
		return res, fmt.Errorf("raw producer: %w", err)
	}
	res.wall = time.Duration(rep.WallNs)
	if rep.Failed > 0 {
		return res, fmt.Errorf("raw producer: %d of %d records failed, first: %s", rep.Failed, rep.Events, rep.FirstEr)
	}
	if int64(rep.Events) != want {
		return res, fmt.Errorf("raw producer: the rows file held %d events, want %d", rep.Events, want)
	}
	if res.records, err = e.f.endOffsetSum(ctx, topic); err != nil {
		return res, fmt.Errorf("list end offsets: %w", err)
	}
	if res.records != want {
		return res, fmt.Errorf("topic %s holds %d records after the raw producer, want %d", topic, res.records, want)
	}
	return res, nil
}

// child is this binary re-executed as a baseline (-produce-only,
// -stream-only): its spec as JSON in the flag, its report as lines on its
// stdout; it exits when its stdin ends, so the parent can read its CPU and
// memory from /proc first.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *bufio.Scanner
}

func (e *env) startChild(ctx context.Context, flag string, spec any) (*child, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, e.self, flag, string(b))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	lines := bufio.NewScanner(stdout)
	lines.Buffer(make([]byte, 64<<10), 1<<20)
	return &child{cmd: cmd, stdin: stdin, lines: lines}, nil
}

// next returns the rest of the child's next line, which must be prefix, a
// space and the rest.
func (c *child) next(prefix string) (string, error) {
	if !c.lines.Scan() {
		return "", fmt.Errorf("child ended before %q: %v", prefix, c.lines.Err())
	}
	rest, ok := strings.CutPrefix(c.lines.Text(), prefix+" ")
	if !ok {
		return "", fmt.Errorf("child said %q, want %q", c.lines.Text(), prefix)
	}
	return rest, nil
}

// done reads the child's "done" line into report (JSON).
func (c *child) done(report any) error {
	line, err := c.next("done")
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(line), report); err != nil {
		return fmt.Errorf("done line %q: %w", line, err)
	}
	return nil
}

// kill ends the child after a failure.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
}

// finish ends the child's stdin and waits for it to exit.
func (c *child) finish() error {
	c.stdin.Close()
	return c.cmd.Wait()
}

// produceChild is the -produce-only process.
func produceChild(specJSON string) error {
	var spec produceSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return err
	}
	lsn, err := pglogrepl.ParseLSN(spec.CommitLSN)
	if err != nil {
		return err
	}
	events, err := loadEvents(spec.Rows, spec.Events, lsn)
	if err != nil {
		return err
	}
	cfg, err := walpostConfig()
	if err != nil {
		return err
	}
	// The producer `walpost run` builds from the same configuration,
	// without the metrics hooks.
	kcfg, err := kafkaconf.ConfigFrom(cfg)
	if err != nil {
		return err
	}
	kcfg.Brokers, kcfg.DefaultTopic = spec.Brokers, spec.Topic
	k, err := kafka.New(kcfg)
	if err != nil {
		return err
	}
	defer k.Close()
	if err := warmUp(k, events, spec.Topic); err != nil {
		return err
	}

	fmt.Println("ready", len(events))
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() || in.Text() != "go" {
		return errors.New("no go from the parent")
	}

	rep := produceAll(k, events, cfg.Pipeline)
	b, _ := json.Marshal(rep)
	fmt.Println("done", string(b))
	// Stay alive until the parent has read CPU and memory from /proc.
	for in.Scan() {
	}
	return nil
}

// warmUp readies k outside the clock: metadata, connections, the topic's
// max.message.bytes (CheckSize reads and caches it).
func warmUp(k *kafka.Sink, events []outbox.Event, topic string) error {
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := k.Client().Ping(wctx); err != nil {
		return fmt.Errorf("ping brokers: %w", err)
	}
	k.Client().ForceMetadataRefresh()
	if len(events) > 0 {
		r, err := kafka.BuildRecord(&events[0], topic)
		if err != nil {
			return err
		}
		if err := k.CheckSize(r); err != nil {
			return err
		}
	}
	return nil
}

// produceAll produces events through k within the in-flight bounds and reports the time to the last acknowledgement.
func produceAll(k *kafka.Sink, events []outbox.Event, bounds config.Pipeline) produceReport {
	// In-flight bounds like walpost's tracker: events and their Size(),
	// released on acknowledgement.
	var (
		mu       sync.Mutex
		cond     = sync.NewCond(&mu)
		nEvents  int
		nBytes   int64
		acked    int
		failed   int
		firstErr error
		lastAck  time.Time
	)
	allDone := make(chan struct{})
	total := len(events)
	start := time.Now()
	for i := range events {
		ev := &events[i]
		size := int64(ev.Size())
		mu.Lock()
		for nEvents > 0 && ((nEvents >= bounds.MaxInFlightEvents) ||
			(nBytes+size > bounds.MaxInFlightBytes)) {
			cond.Wait()
		}
		nEvents++
		nBytes += size
		mu.Unlock()
		k.Produce(ev, sink.AckFunc(func(_ sink.Result, err error) {
			mu.Lock()
			nEvents--
			nBytes -= size
			acked++
			if err != nil {
				failed++
				if firstErr == nil {
					firstErr = err
				}
			}
			if acked == total {
				lastAck = time.Now()
				close(allDone)
			}
			mu.Unlock()
			cond.Signal()
		}))
	}
	if total == 0 {
		lastAck = start
		close(allDone)
	}
	<-allDone
	rep := produceReport{Events: total, WallNs: lastAck.Sub(start).Nanoseconds(), Failed: failed}
	if firstErr != nil {
		rep.FirstEr = firstErr.Error()
	}
	return rep
}

// loadEvents reads the rows file into events as walpost's stream would
// decode them: one buffer per event, its strings views of that buffer,
// created_at rewritten to RFC 3339 and the commit LSN text computed ahead
// (the stream does both before the sink sees the event).
func loadEvents(path string, want int, commitLSN pglogrepl.LSN) ([]outbox.Event, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	r := bufio.NewReaderSize(fh, 1<<20)
	lsnText := commitLSN.String()
	commitTime := time.Now()
	events := make([]outbox.Event, 0, want)
	var lens [5]int
	for {
		// A row: five uvarint-prefixed fields (id, idempotency_key,
		// payload, created_at, event_type).
		var buf []byte
		for j := range lens {
			n, err := binary.ReadUvarint(r)
			if errors.Is(err, io.EOF) && j == 0 {
				return events, nil
			}
			if err != nil {
				return nil, fmt.Errorf("%s: row %d: %w", path, len(events), err)
			}
			if j == 0 {
				buf = make([]byte, 0, 256) // grown below to fit the row
			}
			lens[j] = int(n)
			buf = slices.Grow(buf, int(n))
			if _, err := io.ReadFull(r, buf[len(buf):len(buf)+int(n)]); err != nil {
				return nil, fmt.Errorf("%s: row %d: %w", path, len(events), io.ErrUnexpectedEOF)
			}
			buf = buf[:len(buf)+int(n)]
		}
		created := buf[len(buf)-lens[4]-lens[3] : len(buf)-lens[4]]
		buf = outbox.AppendRFC3339(slices.Grow(buf, 40), created)
		o := 0
		field := func(n int) []byte { v := buf[o : o+n : o+n]; o += n; return v }
		str := func(b []byte) string {
			if len(b) == 0 {
				return ""
			}
			return unsafe.String(&b[0], len(b)) // buf is never written again
		}
		ev := outbox.Event{
			ID:             str(field(lens[0])),
			IdempotencyKey: str(field(lens[1])),
			Payload:        field(lens[2]),
			CreatedAt:      str(field(lens[3])),
			EventType:      str(field(lens[4])),
		}
		ev.CreatedAtRFC3339 = str(buf[o:])
		ev.CommitLSNText = lsnText
		ev.CommitLSN = commitLSN
		ev.CommitTime = commitTime
		ev.Seq = len(events)
		events = append(events, ev)
	}
}
