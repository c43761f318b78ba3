package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Debezium as a peer: Kafka Connect standalone (connect-runtime, the same
// Kafka version as the broker) running Debezium's PostgreSQL connector with
// the Outbox Event Router, from the jars scripts/debezium.sh resolves. It
// drains its own pgoutput slot of the same backlog into its own topic.

// debeziumResult is one drain by Debezium (Kafka Connect standalone +
// PostgreSQL connector + Outbox Event Router).
type debeziumResult struct {
	wall        time.Duration // JVM start → the topic's end offsets sum to want
	firstToLast time.Duration // first record visible in the topic → the topic's end offsets sum to want
	startup     time.Duration // JVM start → first record visible in the topic
	cpuSecs     float64       // user+system CPU of the Connect JVM over the drain
	peakRSSKiB  int64         // VmHWM of the Connect JVM
	walsndSecs  float64       // CPU of the walsender serving its slot (-1 unknown)
	kafkaSecs   float64       // broker CPU meanwhile (-1 unknown)
	busySecs    float64       // machine busy CPU meanwhile (use machineBusy())
}

type debeziumSpec struct {
	libs        string // directory from `scripts/debezium.sh install`
	table       string // outbox table (in schema public); columns as in migrations/00001_outbox.sql
	slot        string // an existing pgoutput slot, created before the backlog was written
	publication string // an existing publication FOR TABLE <table> WITH (publish='insert')
	topic       string // an existing topic; every event must land there
	want        int64  // number of events in the backlog
	workDir     string // a fresh directory for properties, offsets file and logs
}

// debeziumJVMOptions are what Kafka's bin/connect-standalone.sh runs the
// worker with: its KAFKA_HEAP_OPTS (-Xms256M -Xmx2G) and the default
// KAFKA_JVM_PERFORMANCE_OPTS of bin/kafka-run-class.sh.
var debeziumJVMOptions = []string{
	"-Xms256M", "-Xmx2G",
	"-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
	"-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true",
}

// debeziumLibs resolves Kafka Connect and Debezium (scripts/debezium.sh
// install, a no-op once done) and returns the directory of jars. Like the
// rest of the harness it expects the repository root as working directory.
func debeziumLibs(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, "scripts/debezium.sh", "install")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("scripts/debezium.sh install: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	dir := strings.TrimSpace(lines[len(lines)-1])
	if dir == "" {
		return "", errors.New("scripts/debezium.sh install printed no directory")
	}
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("scripts/debezium.sh install: %w", err)
	}
	return dir, nil
}

// writeProperties writes a Java properties file, keys in the given order.
func writeProperties(path string, kv [][2]string) error {
	var b strings.Builder
	b.WriteString("# Written by the walpost drain benchmark (bench/drain/debezium.go).\n")
	for _, p := range kv {
		b.WriteString(p[0])
		b.WriteByte('=')
		b.WriteString(propertyValue(p[1]))
		b.WriteByte('\n')
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}

// propertyValue escapes v for a .properties file (backslashes, line breaks
// and leading blanks are special).
func propertyValue(v string) string {
	var b strings.Builder
	for i, r := range v {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case i == 0 && (r == ' ' || r == '\t' || r == '\f'):
			b.WriteByte('\\')
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// freeLoopbackPort returns a TCP port on 127.0.0.1 that was free a moment
// ago (Connect's REST listener cannot be switched off).
func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// debeziumConnectorName is the connector's name in Connect.
const debeziumConnectorName = "walpost-bench-debezium"

// connectorFailure asks the worker's REST API for the connector's status
// and describes a failed connector or task; "" while all is well or the
// API is not up yet. A failed task does not end Connect standalone: the
// JVM stays up, doing nothing.
func connectorFailure(ctx context.Context, restPort int) string {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	url := fmt.Sprintf("http://127.0.0.1:%d/connectors/%s/status", restPort, debeziumConnectorName)
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, url, nil)
	if err != nil {
		return ""
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var st struct {
		Connector struct {
			State string `json:"state"`
			Trace string `json:"trace"`
		} `json:"connector"`
		Tasks []struct {
			ID    int    `json:"id"`
			State string `json:"state"`
			Trace string `json:"trace"`
		} `json:"tasks"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
		return ""
	}
	if st.Connector.State == "FAILED" {
		return "the Debezium connector failed: " + traceSummary(st.Connector.Trace)
	}
	for _, t := range st.Tasks {
		if t.State == "FAILED" {
			return fmt.Sprintf("the Debezium task %d failed: %s", t.ID, traceSummary(t.Trace))
		}
	}
	return ""
}

// traceSummary keeps the exception and its causes from a Java stack trace.
func traceSummary(trace string) string {
	var keep []string
	for i, l := range strings.Split(strings.TrimSpace(trace), "\n") {
		if i == 0 || strings.HasPrefix(l, "Caused by: ") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// debeziumConfig returns the worker and connector properties for s.
func (f *fixture) debeziumConfig(s debeziumSpec, restPort int) (worker, connector [][2]string, err error) {
	pc, err := pgconn.ParseConfig(f.pgURL)
	if err != nil {
		return nil, nil, fmt.Errorf("parse PostgreSQL URL: %w", err)
	}
	if strings.HasPrefix(pc.Host, "/") {
		return nil, nil, fmt.Errorf("the PostgreSQL URL names a socket directory (%s); Debezium connects over TCP (JDBC)", pc.Host)
	}
	worker = [][2]string{
		{"bootstrap.servers", strings.Join(f.brokers, ",")},
		// The Outbox Event Router makes the key the idempotency_key column
		// (a string) and the value the payload column: Debezium maps jsonb
		// to a string (semantic type io.debezium.data.Json) holding
		// PostgreSQL's text of the jsonb, so StringConverter writes exactly
		// those bytes, as walpost does. JsonConverter would wrap them in a
		// schema envelope or quote them as a JSON string.
		{"key.converter", "org.apache.kafka.connect.storage.StringConverter"},
		{"value.converter", "org.apache.kafka.connect.storage.StringConverter"},
		{"offset.storage.file.filename", filepath.Join(s.workDir, "connect.offsets")},
		// Debezium confirms the slot's position when Connect commits
		// offsets; walpost confirms continuously.
		{"offset.flush.interval.ms", "1000"},
		{"listeners", "http://127.0.0.1:" + strconv.Itoa(restPort)},
		// Every plugin ships ServiceLoader manifests, so the reflective scan
		// of the classpath (default hybrid_warn: ~4 s more start-up, and a
		// warning recommending this setting) is skipped.
		{"plugin.discovery", "service_load"},
		// Connect turns idempotence off for its producers by default; on, as
		// walpost's producer, so the comparison is fair. Connect keeps its
		// default of one request in flight per connection.
		{"producer.enable.idempotence", "true"},
		{"producer.acks", "all"},
	}
	port := pc.Port
	if port == 0 {
		port = 5432
	}
	connector = [][2]string{
		{"name", debeziumConnectorName},
		{"connector.class", "io.debezium.connector.postgresql.PostgresConnector"},
		{"tasks.max", "1"},
		{"database.hostname", pc.Host},
		{"database.port", strconv.Itoa(int(port))},
		{"database.user", pc.User},
		{"database.password", pc.Password},
		{"database.dbname", pc.Database},
	}
	if pc.TLSConfig == nil {
		connector = append(connector, [2]string{"database.sslmode", "disable"})
	}
	connector = append(connector, [][2]string{
		{"plugin.name", "pgoutput"},
		{"slot.name", s.slot},
		{"slot.drop.on.stop", "false"},
		{"publication.name", s.publication},
		{"publication.autocreate.mode", "disabled"},
		// The slot predates the backlog: stream it, snapshot nothing.
		{"snapshot.mode", "no_data"},
		{"table.include.list", "public." + s.table},
		// Names the connector's logical server (metrics, offsets); no
		// record goes to a topic of this prefix, the router renames them.
		{"topic.prefix", "walpost_bench_" + s.slot},
		{"tombstones.on.delete", "false"},
		{"transforms", "outbox"},
		{"transforms.outbox.type", "io.debezium.transforms.outbox.EventRouter"},
		{"transforms.outbox.table.field.event.id", "id"},
		{"transforms.outbox.table.field.event.key", "idempotency_key"},
		{"transforms.outbox.table.field.event.payload", "payload"},
		// The table has no aggregatetype column (the router's default
		// route.by.field): route by event_type, and a replacement without
		// ${routedByValue} sends every event to the one topic.
		{"transforms.outbox.route.by.field", "event_type"},
		{"transforms.outbox.route.topic.replacement", s.topic},
	}...)
	return worker, connector, nil
}

// runDebezium starts Kafka Connect standalone with Debezium on s.slot and
// waits until s.topic holds s.want records, sampling the JVM's CPU and
// memory, the walsender's CPU and the broker's CPU; then it stops the JVM
// and checks that no record arrived twice.
func (f *fixture) runDebezium(ctx context.Context, s debeziumSpec) (debeziumResult, error) {
	d := &debeziumRun{f: f, s: s, res: debeziumResult{walsndSecs: -1, kafkaSecs: -1}}
	cmd, logFile, err := d.prepare(ctx)
	if err != nil {
		return d.res, err
	}
	defer logFile.Close()
	d.cmd, d.done = cmd, make(chan struct{})

	busy0, kafka0 := machineBusy(), f.kafkaCPU()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return d.res, fmt.Errorf("start java: %w", err)
	}
	go func() { d.waitErr = cmd.Wait(); close(d.done) }()
	pid := cmd.Process.Pid

	if err := d.awaitRecords(ctx, pid, start); err != nil {
		return d.fail(err)
	}
	res := &d.res
	res.busySecs, res.kafkaSecs = machineBusy()-busy0, since(kafka0, f.kafkaCPU())
	if cpu, ok := f.walsenderCPU(ctx, s.slot); ok {
		res.walsndSecs = cpu
	}
	cpu, err := procCPU(pid)
	if err != nil {
		return d.fail(fmt.Errorf("read JVM CPU: %w", err))
	}
	res.cpuSecs = cpu
	if _, hwm, err := procMem(pid); err == nil {
		res.peakRSSKiB = max(res.peakRSSKiB, hwm)
	}
	reached := time.Now()

	// SIGTERM: Connect stops the task, flushes the producer and commits
	// offsets (confirming the slot); KILL if that takes too long.
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-d.done
		logf("Kafka Connect did not exit within 20 s of SIGTERM; killed")
	}

	// Anything sent twice shows up as more records than events.
	if rest := time.Until(reached.Add(time.Second)); rest > 0 {
		time.Sleep(rest)
	}
	n, err := f.endOffsetSum(ctx, s.topic)
	if err != nil {
		return d.res, fmt.Errorf("list end offsets of %s: %w", s.topic, err)
	}
	if n != s.want {
		return d.res, fmt.Errorf("topic %s holds %d records after Debezium stopped, want %d\nKafka Connect log %s (tail):\n%s",
			s.topic, n, s.want, d.logPath, tail(d.logPath, 40))
	}
	return d.res, nil
}

// debeziumRun is one runDebezium: its spec, the Kafka Connect JVM and what was measured so far.
type debeziumRun struct {
	f        *fixture
	s        debeziumSpec
	res      debeziumResult
	restPort int
	logPath  string
	cmd      *exec.Cmd
	done     chan struct{} // closed when the JVM has exited
	waitErr  error         // the JVM's exit, once done is closed
}

// prepare writes the worker and connector properties and returns the JVM's command and its open log file.
func (d *debeziumRun) prepare(ctx context.Context) (*exec.Cmd, *os.File, error) {
	f, s := d.f, &d.s
	var err error
	if s.workDir, err = filepath.Abs(s.workDir); err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(s.workDir, 0o755); err != nil {
		return nil, nil, err
	}
	log4j := filepath.Join(s.libs, "log4j2.properties")
	if _, err := os.Stat(log4j); err != nil {
		return nil, nil, fmt.Errorf("%w (run scripts/debezium.sh install)", err)
	}
	if n, err := f.endOffsetSum(ctx, s.topic); err != nil {
		return nil, nil, fmt.Errorf("list end offsets of %s: %w", s.topic, err)
	} else if n != 0 {
		return nil, nil, fmt.Errorf("topic %s is not empty (%d records)", s.topic, n)
	}
	if d.restPort, err = freeLoopbackPort(); err != nil {
		return nil, nil, err
	}
	worker, connector, err := f.debeziumConfig(*s, d.restPort)
	if err != nil {
		return nil, nil, err
	}
	workerProps := filepath.Join(s.workDir, "worker.properties")
	connectorProps := filepath.Join(s.workDir, "connector.properties")
	if err := writeProperties(workerProps, worker); err != nil {
		return nil, nil, err
	}
	if err := writeProperties(connectorProps, connector); err != nil {
		return nil, nil, err
	}
	d.logPath = filepath.Join(s.workDir, "connect.log")
	logFile, err := os.Create(d.logPath)
	if err != nil {
		return nil, nil, err
	}

	args := append([]string{}, debeziumJVMOptions...)
	args = append(args,
		"-Dlog4j2.configurationFile="+log4j,
		"-cp", filepath.Join(s.libs, "*"),
		"org.apache.kafka.connect.cli.ConnectStandalone", workerProps, connectorProps)
	cmd := exec.Command("java", args...)
	cmd.Dir = s.workDir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group (a Ctrl-C reaches the harness, which stops the
	// JVM), and killed if the harness dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd, logFile, nil
}

// fail kills the JVM if it still runs and returns err with the tail of its log.
func (d *debeziumRun) fail(err error) (debeziumResult, error) {
	select {
	case <-d.done:
	default:
		_ = d.cmd.Process.Kill()
		<-d.done
	}
	return d.res, fmt.Errorf("%w\nKafka Connect log %s (tail):\n%s", err, d.logPath, tail(d.logPath, 40))
}

// awaitRecords samples the JVM (process pid, started at start) until the topic holds s.want records.
func (d *debeziumRun) awaitRecords(ctx context.Context, pid int, start time.Time) error {
	f, s, res := d.f, d.s, &d.res
	var first time.Time
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.done:
			return fmt.Errorf("the Kafka Connect JVM exited early: %v", d.waitErr)
		case <-tick.C:
		}
		if i%10 == 0 {
			if msg := connectorFailure(ctx, d.restPort); msg != "" {
				return errors.New(msg)
			}
		}
		// VmHWM only grows, but the last reading before the JVM exits must
		// not be lost to a failed read at the end.
		if _, hwm, err := procMem(pid); err == nil {
			res.peakRSSKiB = max(res.peakRSSKiB, hwm)
		}
		if cpu, ok := f.walsenderCPU(ctx, s.slot); ok {
			res.walsndSecs = cpu
		}
		n, err := f.endOffsetSum(ctx, s.topic)
		if err != nil {
			continue // transient; the next tick asks again
		}
		now := time.Now()
		if n > 0 && first.IsZero() {
			first = now
		}
		if n >= s.want {
			res.wall = now.Sub(start)
			res.startup = first.Sub(start)
			res.firstToLast = now.Sub(first)
			return nil
		}
	}
}
