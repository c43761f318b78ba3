package integration

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/verify"
)

// The stack comes from `scripts/stack.sh up` (.stack/env). Without it the
// tests skip, unless WALPOST_REQUIRE_STACK=1 (make test), where they fail.
var (
	pgURL     string
	brokers   []string
	binary    string
	repoRoot  string
	buildOnce sync.Once
	buildErr  error
	// The stack's database is migrated once, by the first fixture: tests
	// run in parallel, and each owns its tables, made LIKE outbox.
	migrateOnce sync.Once
	migrateErr  error
)

func TestMain(m *testing.M) {
	_, file, _, _ := runtime.Caller(0)
	repoRoot = filepath.Dir(filepath.Dir(file))
	pgURL = os.Getenv("WALPOST_POSTGRES_URL")
	if b := os.Getenv("WALPOST_KAFKA_BROKERS"); b != "" {
		brokers = strings.Split(b, ",")
	}
	code := m.Run()
	if binary != "" {
		os.RemoveAll(filepath.Dir(binary))
	}
	os.Exit(code)
}

// needStack skips (or fails under WALPOST_REQUIRE_STACK=1) without the
// stack, and builds the walpost binary once.
func needStack(t testing.TB) {
	t.Helper()
	if pgURL == "" || len(brokers) == 0 {
		if os.Getenv("WALPOST_REQUIRE_STACK") == "1" {
			t.Fatal("WALPOST_POSTGRES_URL / WALPOST_KAFKA_BROKERS unset: run scripts/stack.sh up and source .stack/env")
		}
		t.Skip("WALPOST_POSTGRES_URL / WALPOST_KAFKA_BROKERS unset: run scripts/stack.sh up and source .stack/env")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "walpost-bin")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "walpost")
		cmd := exec.Command("go", "build", "-o", binary, "./cmd/walpost")
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago. It
// is closed again, so another process may take it before the one it is
// handed to binds it: hand it over through retryPort.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// retryPort calls start with a port from freePort, and again with a new
// one (3 attempts in all) while it fails with output saying the address
// was already in use: the port was taken between freePort and the bind.
// It returns the port of the last attempt and that attempt's output and
// error.
func retryPort(t testing.TB, start func(port int) (output string, err error)) (int, string, error) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		port := freePort(t)
		out, err := start(port)
		if err == nil || attempt == 3 || !strings.Contains(strings.ToLower(out), "already in use") {
			return port, out, err
		}
		t.Logf("port %d was taken before it was bound (attempt %d: %v); again with another", port, attempt, err)
	}
}

func randName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

// fixture is one test's own outbox table, poison table, publication, slot
// and topic; cleanup drops them all. It lives on the stack's PostgreSQL, or
// on a cluster of its own (fixtureOpts.private).
type fixture struct {
	t           testing.TB
	PGURL       string    // the PostgreSQL the fixture lives on
	Server      *pgServer // nil: the stack's
	Table       string
	PoisonTable string
	Publication string
	Slot        string
	Topic       string
	Partitions  int
	Pool        *pgxpool.Pool
	Kafka       *kgo.Client
	Admin       *kadm.Client
}

type fixtureOpts struct {
	partitions  int
	topicConfig map[string]*string
	// private puts the fixture on a scratch PostgreSQL of its own (the
	// stack's major), which the test may stop, crash, restart and
	// reconfigure (f.pg) while other tests run.
	private bool
	// server puts the fixture on another fixture's own cluster.
	server *pgServer
}

// pgServer is a scratch PostgreSQL cluster (scripts/stack.sh
// scratch-pg-up) of one test.
type pgServer struct {
	name, url, data string
	port            int
	walLevel        string
	env             []string // added to scripts/stack.sh's environment
}

// stackDir is the stack's directory (.stack, or WALPOST_STACK_DIR for a
// second stack).
func stackDir() string {
	if d := os.Getenv("WALPOST_STACK_DIR"); d != "" {
		if !filepath.IsAbs(d) {
			d = filepath.Join(repoRoot, d) // as scripts/stack.sh, run in repoRoot, reads it
		}
		return d
	}
	return filepath.Join(repoRoot, ".stack")
}

// scratchServer starts a throwaway PostgreSQL cluster with walLevel for t
// (scripts/stack.sh scratch-pg-up; env is added to the script's
// environment, PG_VERSION=13 for another major); cleanup removes it.
func scratchServer(t testing.TB, walLevel string, env ...string) *pgServer {
	t.Helper()
	needStack(t)
	s := &pgServer{name: randName("scratch"), walLevel: walLevel, env: env}
	s.data = filepath.Join(stackDir(), "scratch", s.name, "data")
	t.Cleanup(func() {
		// Without s.env: PG_VERSION=13 is refused by every command but
		// scratch-pg-up; a cluster stops with the binaries that started it.
		if out, err := stackScript(nil, "scratch-pg-down", s.name); err != nil {
			t.Errorf("scratch-pg-down %s: %v\n%s", s.name, err, out)
		}
	})
	var stdout string
	port, errOut, err := retryPort(t, func(port int) (string, error) {
		out, errOut, err := stackScriptSplit(s.env, "scratch-pg-up", s.name, strconv.Itoa(port), walLevel)
		stdout = out
		return errOut, err
	})
	if err != nil {
		t.Fatalf("scratch-pg-up %s %d %s: %v\n%s", s.name, port, walLevel, err, errOut)
	}
	s.port = port
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	s.url = strings.TrimSpace(lines[len(lines)-1])
	if !strings.HasPrefix(s.url, "postgres://") {
		t.Fatalf("scratch-pg-up printed %q, want a URL", stdout)
	}
	return s
}

// ownServer is a scratch cluster with wal_level=logical, migrated, for a
// fixture of its own (fixtureOpts.private).
func ownServer(t testing.TB) *pgServer {
	t.Helper()
	s := scratchServer(t, "logical")
	if err := runWalpost(t, []string{"WALPOST_POSTGRES_URL=" + s.url}, "migrate"); err != nil {
		t.Fatalf("walpost migrate on the scratch cluster: %v", err)
	}
	return s
}

// ctl stops, starts or restarts the cluster as scripts/stack.sh pg-stop
// [MODE], pg-start and pg-restart do for the stack's.
func (s *pgServer) ctl(verb string, args ...string) error {
	var steps [][]string
	up := []string{"scratch-pg-up", s.name, strconv.Itoa(s.port), s.walLevel}
	switch verb {
	case "pg-stop":
		steps = [][]string{append([]string{"scratch-pg-stop", s.name}, args...)}
	case "pg-start":
		steps = [][]string{up}
	case "pg-restart":
		steps = [][]string{{"scratch-pg-stop", s.name, "fast"}, up}
	default:
		return fmt.Errorf("pgServer.ctl: unknown verb %q", verb)
	}
	for _, st := range steps {
		var env []string
		if st[0] == "scratch-pg-up" {
			env = s.env
		}
		if out, err := stackScript(env, st...); err != nil {
			return fmt.Errorf("scripts/stack.sh %s: %v\n%s", strings.Join(st, " "), err, out)
		}
	}
	return nil
}

// stackCtl runs scripts/stack.sh with args on the stack (the one thing a
// test may change only when it runs alone: no t.Parallel), failing the test
// on error.
func stackCtl(t testing.TB, args ...string) {
	t.Helper()
	if err := stackCtlErr(args...); err != nil {
		t.Fatal(err)
	}
}

func stackCtlErr(args ...string) error {
	if out, err := stackScript(nil, args...); err != nil {
		return fmt.Errorf("scripts/stack.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// stackScript runs scripts/stack.sh with args (at most 6 minutes: on a
// clean clone the first scratch cluster of a major extracts its binaries,
// perhaps behind another stack's extraction, on a machine the whole suite
// keeps busy; env added to its environment) and returns its combined
// output.
func stackScript(env []string, args ...string) (string, error) {
	out, errOut, err := stackScriptSplit(env, args...)
	return out + errOut, err
}

func stackScriptSplit(env []string, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot, "scripts", "stack.sh"), args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// pg stops, starts or restarts the fixture's PostgreSQL as scripts/stack.sh
// pg-stop [MODE], pg-start and pg-restart do: its own scratch cluster
// (fixtureOpts.private), else the stack's (which no other test may be
// using).
func (f *fixture) pg(t testing.TB, verb string, args ...string) {
	t.Helper()
	if err := f.pgErr(verb, args...); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) pgErr(verb string, args ...string) error {
	if f.Server == nil {
		return stackCtlErr(append([]string{verb}, args...)...)
	}
	return f.Server.ctl(verb, args...)
}

func newFixture(t testing.TB, o fixtureOpts) *fixture {
	t.Helper()
	needStack(t)
	if o.partitions == 0 {
		o.partitions = 3
	}
	ctx := context.Background()
	id := randName("t")
	f := &fixture{
		t: t, PGURL: pgURL, Table: "outbox_" + id, PoisonTable: "poison_" + id, Publication: "pub_" + id,
		Slot: "slot_" + id, Topic: "topic_" + id, Partitions: o.partitions,
	}
	if o.server != nil {
		f.Server = o.server
		f.PGURL = o.server.url
	} else if o.private {
		f.Server = ownServer(t)
		f.PGURL = f.Server.url
	} else {
		migrateOnce.Do(func() { migrateErr = runWalpost(t, nil, "migrate") })
		if migrateErr != nil {
			t.Fatalf("walpost migrate: %v", migrateErr)
		}
	}
	pool, err := pgxpool.New(ctx, f.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	f.Pool = pool
	mustExec(t, pool, fmt.Sprintf(`CREATE TABLE %s (LIKE outbox INCLUDING ALL)`, f.Table))
	mustExec(t, pool, fmt.Sprintf(`CREATE TABLE %s (LIKE poison_outbox INCLUDING ALL)`, f.PoisonTable))
	mustExec(t, pool, fmt.Sprintf(`CREATE TRIGGER no_delete BEFORE DELETE ON %s FOR EACH STATEMENT EXECUTE FUNCTION poison_outbox_refuse_delete()`, f.PoisonTable))
	mustExec(t, pool, fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert')`, f.Publication, f.Table))
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	f.Kafka, f.Admin = cl, kadm.NewClient(cl)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The broker's default replication factor: 1, or 3 on KAFKA_NODES=3.
	resp, err := f.Admin.CreateTopic(cctx, int32(o.partitions), -1, o.topicConfig, f.Topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic: %v", err)
	}
	t.Cleanup(f.cleanup)
	// The broker answers CreateTopics once the controller has the topic;
	// its metadata follows a moment later (longer under load), and
	// walpost refuses a topic its metadata request does not list.
	waitFor(t, 30*time.Second, "the broker's metadata to list topic "+f.Topic, func() bool {
		lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
		defer lcancel()
		td, err := f.Admin.ListTopics(lctx, f.Topic)
		if err != nil {
			return false
		}
		d, ok := td[f.Topic]
		if !ok || d.Err != nil || len(d.Partitions) != o.partitions {
			return false
		}
		for _, p := range d.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return false
			}
		}
		return true
	})
	return f
}

func (f *fixture) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if f.Server != nil {
		// The scratch cluster goes with everything on it.
		_, _ = f.Admin.DeleteTopics(ctx, f.Topic)
		f.Kafka.Close()
		f.Pool.Close()
		return
	}
	// The slot may still be held by a walsender that is shutting down; a
	// slot left behind pins WAL for the rest of the run, so say so.
	for deadline := time.Now().Add(20 * time.Second); ; {
		_, err := f.Pool.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, f.Slot)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			f.t.Logf("cleanup: replication slot %s NOT dropped (it retains WAL until dropped by hand): %v", f.Slot, err)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	_, _ = f.Pool.Exec(ctx, `DELETE FROM walpost_position WHERE slot = $1`, f.Slot)
	_, _ = f.Pool.Exec(ctx, fmt.Sprintf(`DROP PUBLICATION IF EXISTS %s`, f.Publication))
	_, _ = f.Pool.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %s`, f.Table))
	_, _ = f.Pool.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s DISABLE TRIGGER no_delete`, f.PoisonTable))
	_, _ = f.Pool.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %s`, f.PoisonTable))
	_, _ = f.Admin.DeleteTopics(ctx, f.Topic)
	f.Kafka.Close()
	f.Pool.Close()
}

func mustExec(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// env returns the WALPOST_* variables that point walpost at the fixture.
func (f *fixture) env(extra ...string) []string {
	return append([]string{
		"WALPOST_POSTGRES_URL=" + f.PGURL,
		"WALPOST_KAFKA_BROKERS=" + strings.Join(brokers, ","),
		"WALPOST_POSTGRES_TABLE=" + f.Table,
		"WALPOST_POSTGRES_POISON_TABLE=" + f.PoisonTable,
		"WALPOST_POSTGRES_PUBLICATION=" + f.Publication,
		"WALPOST_POSTGRES_SLOT=" + f.Slot,
		"WALPOST_KAFKA_TOPIC=" + f.Topic,
		"WALPOST_HTTP_LISTEN=",
		"WALPOST_LOG_LEVEL=debug",
	}, extra...)
}

// runWalpost runs a walpost command to completion with the stack's
// environment plus env.
func runWalpost(t testing.TB, env []string, args ...string) error {
	t.Helper()
	out, err := walpostOutput(t, env, args...)
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

func walpostOutput(t testing.TB, env []string, args ...string) (string, error) {
	t.Helper()
	needStack(t)
	cmd := exec.Command(binary, args...)
	cmd.SysProcAttr = childAttr()
	cmd.Env = append(baseEnv(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func baseEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WALPOST_") || strings.HasPrefix(kv, "WALPOST_POSTGRES_URL=") || strings.HasPrefix(kv, "WALPOST_KAFKA_BROKERS=") {
			out = append(out, kv)
		}
	}
	return out
}

// proc is a running `walpost run`.
type proc struct {
	t    testing.TB
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func (f *fixture) start(extraEnv ...string) *proc {
	f.t.Helper()
	logFile, err := os.CreateTemp(f.t.TempDir(), "walpost-*.log")
	if err != nil {
		f.t.Fatal(err)
	}
	cmd := exec.Command(binary, "run")
	cmd.SysProcAttr = childAttr()
	cmd.Env = append(baseEnv(), f.env(extraEnv...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	p := &proc{t: f.t, cmd: cmd, log: logFile.Name(), done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	f.t.Cleanup(func() {
		if f.t.Failed() {
			f.t.Logf("walpost log %s, its sessions (where each started, from which checkpoint or position, and why each ended):\n%s", p.log, sessionLines(p.log, 80))
			f.t.Logf("walpost log %s, without the Kafka client's debug lines:\n%s", p.log, tailOwn(p.log, 60))
			p.dumpGoroutines()
		}
		p.kill()
	})
	return p
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// dumpGoroutines asks a running walpost for its goroutines (SIGQUIT: the
// Go runtime writes every stack to stderr, the log, and exits) and logs
// them: what a walpost that stopped making progress was waiting on.
func (p *proc) dumpGoroutines() {
	if p.exited() {
		return
	}
	b, _ := os.ReadFile(p.log)
	before := len(b)
	_ = p.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
	b, _ = os.ReadFile(p.log)
	if len(b) > before {
		dump := string(b[before:])
		if i := strings.Index(dump, "SIGQUIT"); i >= 0 {
			dump = dump[i:]
		}
		p.t.Logf("walpost (pid %d) goroutines at the failure (walpost's own; the whole dump is in the log):\n%s", p.cmd.Process.Pid, ownGoroutines(dump))
	}
}

// ownGoroutines keeps, of a goroutine dump, the goroutines with a frame
// in walpost's own packages: the runtime's and the Kafka client's idle
// ones would otherwise push the test's own messages out of a CI report.
func ownGoroutines(dump string) string {
	var keep []string
	for _, g := range strings.Split(dump, "\n\n") {
		if strings.HasPrefix(g, "goroutine ") && strings.Contains(g, "github.com/walpost/walpost/") {
			keep = append(keep, g)
		}
	}
	return fmt.Sprintf("%d goroutine(s)\n%s", len(keep), strings.Join(keep, "\n\n"))
}

// sessionLines are the lines of a walpost log that tell its sessions
// apart: where each started streaming and from which checkpoint or
// position, walpost's own warnings and errors, and the Kafka client's
// errors; the last n when there are more, with how many were left out.
// A duplicate or a loss a test finds is traced to a session with them,
// however far above the log's tail they are.
func sessionLines(path string, n int) string {
	b, _ := os.ReadFile(path)
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if strings.Contains(l, "level=DEBUG") || (strings.Contains(l, "component=kafka") && !strings.Contains(l, "level=ERROR")) {
			continue
		}
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") || strings.Contains(l, "msg=streaming") ||
			strings.Contains(l, `msg="exactly-once`) || strings.Contains(l, "fenced") {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("(%d lines before these)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// tailOwn is tail without the Kafka client's debug lines (every request
// it writes and reads), which otherwise fill the tail of a busy walpost.
func tailOwn(path string, n int) string {
	b, _ := os.ReadFile(path)
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if !(strings.Contains(l, "level=DEBUG") && strings.Contains(l, "component=kafka")) {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (p *proc) kill() {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// signal sends sig and waits up to timeout for the exit.
func (p *proc) signal(sig syscall.Signal, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return time.Since(start), p.err
	case <-time.After(timeout):
		return time.Since(start), errors.New("walpost did not exit in time")
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitLog waits until the log contains s.
func (p *proc) waitLog(s string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(p.log)
		if strings.Contains(string(b), s) {
			return true
		}
		if p.exited() {
			b, _ := os.ReadFile(p.log)
			return strings.Contains(string(b), s)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// slotState reads the slot's confirmed_flush_lsn and whether it is active.
func (f *fixture) slotState() (pglogrepl.LSN, bool, bool) {
	var lsn *string
	var active bool
	err := f.Pool.QueryRow(context.Background(), `SELECT confirmed_flush_lsn::text, active FROM pg_replication_slots WHERE slot_name = $1`, f.Slot).Scan(&lsn, &active)
	if err != nil || lsn == nil {
		return 0, false, false
	}
	l, _ := pglogrepl.ParseLSN(*lsn)
	return l, active, true
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitProgress polls cond until it reports done. It fails when the mark
// cond also reports (what moves while the work goes on) stays the same
// for stall, or after limit in all: a loaded machine slows the work down,
// only a stuck one stops it.
func waitProgress(t testing.TB, stall, limit time.Duration, what string, cond func() (done bool, mark string)) {
	t.Helper()
	start := time.Now()
	last, moved := "", start
	for {
		done, mark := cond()
		if done {
			return
		}
		now := time.Now()
		if mark != last {
			last, moved = mark, now
		}
		if now.Sub(moved) > stall {
			t.Fatalf("waiting for %s: no progress for %s (still at %s)", what, stall, mark)
		}
		if now.Sub(start) > limit {
			t.Fatalf("timed out after %s waiting for %s (at %s)", limit, what, mark)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// writeTxn inserts keys in one transaction and returns the expected events.
func (f *fixture) writeTxn(ctx context.Context, txnID string, keys []string, payload string) ([]verify.Expected, error) {
	tx, err := f.Pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	rows := make([][]any, len(keys))
	for i, k := range keys {
		rows[i] = []any{k, payload}
	}
	if len(keys) > 50 {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{f.Table}, []string{"idempotency_key", "payload"}, pgx.CopyFromRows(rows)); err != nil {
			return nil, err
		}
	} else {
		b := &pgx.Batch{}
		for _, k := range keys {
			b.Queue(fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES ($1, $2)`, f.Table), k, payload)
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	exp := make([]verify.Expected, len(keys))
	for i, k := range keys {
		exp[i] = verify.Expected{Key: k, Txn: txnID, Index: i}
	}
	return exp, nil
}

// record is a consumed Kafka record with the fields tests look at.
type record struct {
	verify.Observed
	Value   []byte
	Headers map[string]string
	Time    time.Time
}

// consumeAll reads the topic from the start until want distinct keys of
// the expected set have arrived and the topic is quiet, or timeout passes.
func (f *fixture) consumeAll(t testing.TB, want int, timeout time.Duration) []record {
	t.Helper()
	return f.consumeAllWith(t, want, timeout)
}

// consumeAllWith is consumeAll with more consumer options (e.g.
// read_committed isolation).
func (f *fixture) consumeAllWith(t testing.TB, want int, timeout time.Duration, opts ...kgo.Opt) []record {
	t.Helper()
	distinct := map[string]bool{}
	var out []record
	f.read(t, timeout, 2*time.Second, func(r *kgo.Record) {
		rec := record{Observed: observe(r), Value: r.Value, Headers: map[string]string{}, Time: r.Timestamp}
		for _, h := range r.Headers {
			rec.Headers[h.Key] = string(h.Value)
		}
		distinct[rec.Key] = true
		out = append(out, rec)
	}, func() bool { return len(distinct) >= want }, opts...)
	return out
}

// read is the one consumer of the integration tests: it reads the
// fixture's topic from the start (with opts added), handing each record to
// each, until done (asked after every poll) returns true and the topic has
// been quiet for quiet, or timeout passes.
func (f *fixture) read(t testing.TB, timeout, quiet time.Duration, each func(*kgo.Record), done func() bool, opts ...kgo.Opt) {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(f.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	deadline := time.Now().Add(timeout)
	quietSince := time.Now()
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), min(time.Second, time.Until(deadline)))
		fetches := cl.PollFetches(ctx)
		cancel()
		n := 0
		fetches.EachRecord(func(r *kgo.Record) {
			n++
			each(r)
		})
		if n > 0 {
			quietSince = time.Now()
		}
		if done() && time.Since(quietSince) >= quiet {
			return
		}
	}
}

// observe is what the validator needs of a record: key, partition,
// offset, commit_lsn.
func observe(r *kgo.Record) verify.Observed {
	o := verify.Observed{Key: string(r.Key), Partition: r.Partition, Offset: r.Offset}
	for _, h := range r.Headers {
		if h.Key == "commit_lsn" {
			o.CommitLSN, _ = pglogrepl.ParseLSN(string(h.Value))
		}
	}
	return o
}

func observed(recs []record) []verify.Observed {
	out := make([]verify.Observed, len(recs))
	for i, r := range recs {
		out[i] = r.Observed
	}
	return out
}

// currentWAL returns pg_current_wal_lsn().
func (f *fixture) currentWAL() pglogrepl.LSN {
	var s string
	if err := f.Pool.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		f.t.Fatal(err)
	}
	l, _ := pglogrepl.ParseLSN(s)
	return l
}

// watchRSS samples the process's RSS every 50 ms until the returned stop
// is called (at most once matters; later calls are no-ops, and the test's
// cleanup calls it too); peak is the largest sample, 0 before the first.
func watchRSS(t testing.TB, p *proc) (peak func() int64, stop func()) {
	var top atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if kb := int64(rssKB(p.cmd.Process.Pid)); kb > top.Load() {
				top.Store(kb)
			}
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(done); wg.Wait() }) }
	t.Cleanup(stop)
	return top.Load, stop
}

// rssKB returns the resident set size of pid in KiB.
func rssKB(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "VmRSS:") {
			fields := strings.Fields(sc.Text())
			n, _ := strconv.Atoi(fields[1])
			return n
		}
	}
	return 0
}
