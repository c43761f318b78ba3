package integration

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/verify"
)

// The session settings a managed service or a DBA puts on a role or a
// database, which end or cancel sessions that sit idle or run long.
var managedSettings = [][2]string{
	{"idle_session_timeout", "2s"},
	{"idle_in_transaction_session_timeout", "2s"},
	{"statement_timeout", "1s"},
	{"lock_timeout", "1s"},
}

const (
	managedWindow  = 60 * time.Second // the writers' run
	managedWriters = 8
	managedMaxTxn  = 10
	managedPause   = 25 * time.Millisecond // between a writer's transactions
	// Below this baseline p99, the bound is 2 × this instead: on a
	// 2-core machine scheduler noise dominates tiny values.
	managedLatencyFloor = 50 * time.Millisecond
)

// TestManagedSettingsAcceptance: with idle_session_timeout and
// idle_in_transaction_session_timeout 2 s, statement_timeout and
// lock_timeout 1 s set on walpost's role AND on the database, in each
// delivery mode, 8 writers for 60 s through walpost run, with walpost
// verify, walpost prune and walpost poison replay run once during the
// writes and walpost recover once after them: nothing is lost, walpost
// restarts its session at most once, every command exits 0, and the
// commit→visible p99 is within 2× that of the same run without the
// settings (the baseline, run just before on the same cluster as the same
// role, its settings reset).
//
// commit→visible is measured on the client side: from the writer's clock
// right after its COMMIT returned, to the clock of a live read_committed
// consumer (franz-go) when the fetch that carried the record returned
// (records carry no commit time: created_at is the insert's
// transaction start). Only the writers' events count, not the commands'.
//
// recover runs for real: walpost run is stopped, the slot dropped, 200
// rows committed in the gap, then walpost recover (exactly-once: with
// --allow-duplicates) re-creates the slot and produces the gap, with the
// default recover.margin (it re-sends the rows of the last 10 minutes still
// in the table, so its snapshot transaction runs for seconds); walpost run
// then streams on from the new slot, and after a quiet period longer than
// idle_session_timeout, more rows. prune runs with recover.margin 0s, so
// it deletes rows (up to the recorded position) while the writers go on.
// poison replay re-sends a row put into the poison table by hand, which
// must arrive with replayed_from_poison: true.
//
// It runs several minutes: only with WALPOST_ACCEPTANCE=1.
func TestManagedSettingsAcceptance(t *testing.T) {
	if os.Getenv("WALPOST_ACCEPTANCE") != "1" {
		t.Skip("an acceptance run of several minutes: set WALPOST_ACCEPTANCE=1")
	}
	// A cluster of the test's own: ALTER ROLE / ALTER DATABASE disturb no
	// other test.
	admin := ownFixture(t, 3)
	mustExec(t, admin.Pool, `CREATE ROLE wp_managed LOGIN SUPERUSER PASSWORD 'wp'`)
	u, err := url.Parse(admin.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	db := strings.TrimPrefix(u.Path, "/")
	u.User = url.UserPassword("wp_managed", "wp")
	roleURL := u.String()

	for _, mode := range []string{"at-least-once", "exactly-once"} {
		t.Run(mode, func(t *testing.T) {
			setManagedSettings(t, admin, db, roleURL, false)
			base := runManaged(t, admin, mode, roleURL, false)
			setManagedSettings(t, admin, db, roleURL, true)
			with := runManaged(t, admin, mode, roleURL, true)
			setManagedSettings(t, admin, db, roleURL, false)

			for _, r := range []*managedRun{base, with} {
				t.Logf("%s %s: %s", mode, r.label(), r.summary())
				for _, c := range r.cmds {
					t.Logf("%s %s: walpost %s: exit %d, took %s, first line: %q", mode, r.label(), strings.Join(c.args, " "), c.code, c.took.Round(time.Millisecond), c.first)
				}
			}
			if with.restarts > 1 {
				t.Errorf("%s: %d session restarts with the settings, want at most 1", mode, with.restarts)
			}
			limit := 2 * max(base.lat.p99, managedLatencyFloor)
			t.Logf("%s: commit→visible p99 %s with the settings, %s without; bound %s (2 × max(baseline p99, %s))",
				mode, ms(with.lat.p99), ms(base.lat.p99), ms(limit), managedLatencyFloor)
			if with.lat.p99 > limit {
				t.Errorf("%s: commit→visible p99 %s with the settings, want at most %s (baseline %s)", mode, ms(with.lat.p99), ms(limit), ms(base.lat.p99))
			}
		})
	}
}

// setManagedSettings sets (on) or resets the settings on the role and on
// the database, and checks that a new session of the role sees them.
func setManagedSettings(t *testing.T, admin *fixture, db, roleURL string, on bool) {
	t.Helper()
	dbName := pgx.Identifier{db}.Sanitize()
	for _, s := range managedSettings {
		if on {
			mustExec(t, admin.Pool, fmt.Sprintf("ALTER ROLE wp_managed SET %s = '%s'", s[0], s[1]))
			mustExec(t, admin.Pool, fmt.Sprintf("ALTER DATABASE %s SET %s = '%s'", dbName, s[0], s[1]))
		} else {
			mustExec(t, admin.Pool, fmt.Sprintf("ALTER ROLE wp_managed RESET %s", s[0]))
			mustExec(t, admin.Pool, fmt.Sprintf("ALTER DATABASE %s RESET %s", dbName, s[0]))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, roleURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var got []string
	for _, s := range managedSettings {
		var v string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", s[0]).Scan(&v); err != nil {
			t.Fatal(err)
		}
		want := "0"
		if on {
			want = s[1]
		}
		if v != want {
			t.Fatalf("a new session of wp_managed has %s = %s, want %s", s[0], v, want)
		}
		got = append(got, s[0]+"="+v)
	}
	var sources int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_db_role_setting s
		WHERE s.setrole = (SELECT oid FROM pg_roles WHERE rolname = 'wp_managed') OR s.setdatabase = (SELECT oid FROM pg_database WHERE datname = $1)`, db).Scan(&sources); err != nil {
		t.Fatal(err)
	}
	t.Logf("session settings of wp_managed on database %s: %s (%d pg_db_role_setting rows: role and database)", db, strings.Join(got, ", "), sources)
}

// managedRun is the figures of one run.
type managedRun struct {
	mode     string
	settings bool
	written  int // committed events: writers, gap, after
	window   int // of them, the writers' (the latency sample)
	failed   int // writer transactions whose COMMIT failed
	rep      *verify.Report
	restarts int // "session failed" in walpost run's logs
	lat      latencyStats
	cmds     []cmdRun
	poison   bool // the replayed poison row arrived, marked
}

func (r *managedRun) label() string {
	if r.settings {
		return "with the settings"
	}
	return "baseline"
}

func (r *managedRun) summary() string {
	return fmt.Sprintf("written %d (writers %d, %d failed transactions), delivered %d, lost %d, duplicates %d, out of order %d, unexpected %d, session restarts %d, commit→visible p50 %s p99 %s max %s (%d events), poison row replayed: %v",
		r.written, r.window, r.failed, r.rep.Delivered, len(r.rep.Lost), r.rep.Duplicates(), len(r.rep.OutOfOrder), r.rep.Unexpected,
		r.restarts, ms(r.lat.p50), ms(r.lat.p99), ms(r.lat.max), r.lat.n, r.poison)
}

type latencyStats struct {
	n             int
	p50, p99, max time.Duration
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// runManaged is one run in mode on a fresh fixture on admin's cluster, as
// the role of roleURL (whose settings the caller set or reset).
func runManaged(t *testing.T, admin *fixture, mode, roleURL string, settings bool) *managedRun {
	t.Helper()
	r := &managedRun{mode: mode, settings: settings}
	f := newFixture(t, fixtureOpts{partitions: 3, server: admin.Server})
	env := []string{"WALPOST_POSTGRES_URL=" + roleURL, "WALPOST_LOG_LEVEL=info"}
	recoverArgs := []string{"recover"}
	if mode == "exactly-once" {
		env = f.exactlyOnceEnv(env...)
		recoverArgs = append(recoverArgs, "--allow-duplicates")
	}
	cmdEnv := append(f.env(), env...)
	ctx := context.Background()

	poisonKey := randName("managed-poison")
	mustExec(t, f.Pool, fmt.Sprintf(`INSERT INTO %s (idempotency_key, outbox_id, payload, created_at, topic, attempts, last_error, error_class, commit_lsn)
		VALUES ($1, gen_random_uuid(), '{"n": 1}', now(), $2, 3, 'refused', 'MESSAGE_TOO_LARGE', '0/16B3748')`, f.PoisonTable), poisonKey, f.Topic)

	w := watchManaged(t, f, poisonKey)
	defer w.stop()
	p := f.start(env...)
	waitStreaming(t, p)

	// 8 writers for 60 s; verify, prune and poison replay meanwhile.
	load := startTimedLoad(t, f, managedWriters, managedMaxTxn, managedPause)
	start := time.Now()
	cmdsDone := make(chan []cmdRun, 1)
	go func() {
		var cmds []cmdRun
		at := func(d time.Duration) { time.Sleep(time.Until(start.Add(d))) }
		at(10 * time.Second)
		cmds = append(cmds, managedCommand(cmdEnv, "verify", "--events", "2000", "--writers", "2", "--txn-size", "10", "--timeout", "60s"))
		at(25 * time.Second)
		cmds = append(cmds, managedCommand(append(cmdEnv, "WALPOST_RECOVER_MARGIN=0s"), "prune", "--older-than", "1ms"))
		at(40 * time.Second)
		cmds = append(cmds, managedCommand(cmdEnv, "poison", "replay", "--key", poisonKey))
		cmdsDone <- cmds
	}()
	sleepAlive(t, p, managedWindow, "while the writers ran")
	expected, commitAt := load.finish(t)
	r.window, r.failed = len(expected), int(load.failed)
	r.cmds = <-cmdsDone
	w.waitKeys(t, expected, 3*time.Minute)
	r.lat = w.latencies(commitAt)
	alive(t, p, "after the writers")

	// recover: walpost stopped, the slot dropped, a gap committed.
	if _, err := p.signal(syscall.SIGTERM, time.Minute); err != nil {
		t.Logf("walpost run after SIGTERM: %v", err)
	}
	waitFor(t, 30*time.Second, "the slot to be released", func() bool { _, act, _ := f.slotState(); return !act })
	mustExec(t, f.Pool, `SELECT pg_drop_replication_slot($1)`, f.Slot)
	for i := 0; i < 4; i++ {
		keys := make([]string, 50)
		for j := range keys {
			keys[j] = fmt.Sprintf("gap-t%d-r%d", i, j)
		}
		exp, err := f.writeTxn(ctx, fmt.Sprintf("gap-t%d", i), keys, `{"data": "gap"}`)
		if err != nil {
			t.Fatal(err)
		}
		expected = append(expected, exp...)
	}
	r.cmds = append(r.cmds, managedCommand(cmdEnv, recoverArgs...))

	p2 := f.start(env...)
	waitStreaming(t, p2)
	for _, txn := range []string{"after", "after-quiet"} {
		if txn == "after-quiet" {
			// Quiet for longer than idle_session_timeout: walpost's side
			// connection and pool sit idle.
			sleepAlive(t, p2, 5*time.Second, "while the outbox was quiet")
		}
		keys := make([]string, 50)
		for j := range keys {
			keys[j] = fmt.Sprintf("%s-r%d", txn, j)
		}
		exp, err := f.writeTxn(ctx, txn, keys, `{"data": "after"}`)
		if err != nil {
			t.Fatal(err)
		}
		expected = append(expected, exp...)
	}
	r.written = len(expected)
	w.waitKeys(t, expected, 3*time.Minute)
	alive(t, p2, "after recover")
	w.stop()

	r.rep = verify.Validate(expected, w.observed())
	r.poison = w.poisonSeen()
	r.restarts = logCount(p, "session failed") + logCount(p2, "session failed")
	t.Logf("%s %s: %s", mode, r.label(), r.summary())

	if !r.rep.OK() || r.rep.Unexpected != 0 {
		t.Errorf("%s %s: delivery failed: %s", mode, r.label(), r.rep)
	}
	if !r.poison {
		t.Errorf("%s %s: the poison row %s did not arrive with replayed_from_poison: true", mode, r.label(), poisonKey)
	}
	for _, c := range r.cmds {
		if c.code != 0 {
			t.Errorf("%s %s: walpost %s: exit %d, want 0\nstdout:\n%s\nstderr (tail):\n%s", mode, r.label(), strings.Join(c.args, " "), c.code, c.stdout, lastLines(c.stderr, 20))
		}
	}
	if r.restarts > 0 {
		t.Logf("%s %s: session restarts:\n%s", mode, r.label(), grepLines(p.log, "session failed")+grepLines(p2.log, "session failed"))
	}
	return r
}

// cmdRun is a walpost command's outcome.
type cmdRun struct {
	args           []string
	code           int
	took           time.Duration
	first          string // its stdout's first line
	stdout, stderr string
}

// managedCommand runs a walpost command to completion (at most 5
// minutes); it touches no testing.T, so it runs beside the test.
func managedCommand(env []string, args ...string) cmdRun {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.SysProcAttr = childAttr()
	cmd.Env = append(baseEnv(), env...)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	start := time.Now()
	err := cmd.Run()
	r := cmdRun{args: args, took: time.Since(start), stdout: o.String(), stderr: e.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		r.code, r.stderr = -1, r.stderr+err.Error()
	}
	r.first = firstLine(strings.TrimSpace(r.stdout))
	return r
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// grepLines returns the lines of the file at path that contain s.
func grepLines(path, s string) string {
	b, _ := os.ReadFile(path)
	var out strings.Builder
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			out.WriteString(l + "\n")
		}
	}
	return out.String()
}

// timedLoad is writers committing transactions of 1..maxTxn rows, each
// key's commit time noted (the writer's clock right after COMMIT
// returned). A failed transaction is not retried; finish settles it by
// looking for its rows.
type timedLoad struct {
	f        *fixture
	pool     *pgxpool.Pool
	stopping chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	expected []verify.Expected
	maybe    [][]verify.Expected
	commitAt map[string]time.Time
	failed   int64
}

func startTimedLoad(t *testing.T, f *fixture, writers, maxTxn int, pause time.Duration) *timedLoad {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(f.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = int32(writers + 2) // a connection per writer
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := &timedLoad{f: f, pool: pool, stopping: make(chan struct{}), commitAt: map[string]time.Time{}}
	insert := fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES ($1, $2)`, f.Table)
	payload := `{"data": "` + strings.Repeat("x", 150) + `"}`
	for w := 0; w < writers; w++ {
		l.wg.Add(1)
		go func(w int) {
			defer l.wg.Done()
			for n := 0; ; n++ {
				select {
				case <-l.stopping:
					return
				default:
				}
				size := 1 + (n*7+w*3)%maxTxn
				txn := fmt.Sprintf("m-w%d-t%d", w, n)
				exp := make([]verify.Expected, size)
				b := &pgx.Batch{}
				for i := range exp {
					exp[i] = verify.Expected{Key: fmt.Sprintf("%s-r%d", txn, i), Txn: txn, Index: i}
					b.Queue(insert, exp[i].Key, payload)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() })
				at := time.Now()
				cancel()
				l.mu.Lock()
				if err != nil {
					l.maybe = append(l.maybe, exp)
					l.failed++
				} else {
					l.expected = append(l.expected, exp...)
					for _, e := range exp {
						l.commitAt[e.Key] = at
					}
				}
				l.mu.Unlock()
				if err != nil {
					time.Sleep(200 * time.Millisecond)
					continue
				}
				time.Sleep(pause)
			}
		}(w)
	}
	return l
}

// finish stops the writers and returns every committed event (the maybe
// transactions whose rows exist included) and the commit times of those
// whose COMMIT returned.
func (l *timedLoad) finish(t *testing.T) ([]verify.Expected, map[string]time.Time) {
	t.Helper()
	close(l.stopping)
	l.wg.Wait()
	l.pool.Close()
	expected := l.expected
	for _, txn := range l.maybe {
		keys := make([]string, len(txn))
		for i, e := range txn {
			keys[i] = e.Key
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		rows, err := existingKeys(ctx, l.f, keys)
		cancel()
		if err != nil {
			t.Fatalf("resolving a failed transaction: %v", err)
		}
		t.Logf("writer transaction %s failed; %d of its %d rows are in the table", txn[0].Txn, len(rows), len(txn))
		if len(rows) == len(txn) {
			expected = append(expected, txn...)
		}
	}
	t.Logf("writers: %d events committed, %d transactions failed", len(expected), len(l.maybe))
	return expected, l.commitAt
}

// managedWatch is a live read_committed consumer of a fixture's topic
// from its start: when each key was first received, every record of the
// expected keys (walpost verify's and the poison row's left out), and
// whether the poison row arrived marked replayed.
type managedWatch struct {
	mu        sync.Mutex
	seenAt    map[string]time.Time
	obs       []verify.Observed
	poison    bool
	lastRecv  time.Time
	cancel    context.CancelFunc
	done      chan struct{}
	stopOnce  sync.Once
	poisonKey string
}

func watchManaged(t *testing.T, f *fixture, poisonKey string) *managedWatch {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(f.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &managedWatch{seenAt: map[string]time.Time{}, cancel: cancel, done: make(chan struct{}), poisonKey: poisonKey, lastRecv: time.Now()}
	go func() {
		defer close(w.done)
		defer cl.Close()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			w.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				w.lastRecv = now
				key := string(r.Key)
				switch {
				case key == w.poisonKey:
					for _, h := range r.Headers {
						if h.Key == "replayed_from_poison" && string(h.Value) == "true" {
							w.poison = true
						}
					}
					return
				case strings.HasPrefix(key, "walpost-verify-"):
					return
				}
				if _, ok := w.seenAt[key]; !ok {
					w.seenAt[key] = now
				}
				w.obs = append(w.obs, observe(r))
			})
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *managedWatch) stop() {
	w.stopOnce.Do(func() { w.cancel(); <-w.done })
}

// waitKeys waits until every expected key was received and nothing
// arrived for 2 s.
func (w *managedWatch) waitKeys(t *testing.T, expected []verify.Expected, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		missing := 0
		for _, e := range expected {
			if _, ok := w.seenAt[e.Key]; !ok {
				missing++
			}
		}
		quiet := time.Since(w.lastRecv)
		w.mu.Unlock()
		if missing == 0 && quiet >= 2*time.Second {
			return
		}
		if time.Now().After(deadline) {
			t.Logf("after %s, %d of %d expected keys not received", timeout, missing, len(expected))
			return // the validator reports them lost
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (w *managedWatch) observed() []verify.Observed {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.obs)
}

func (w *managedWatch) poisonSeen() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.poison
}

// latencies is commit → first received over the keys of commitAt that
// were received.
func (w *managedWatch) latencies(commitAt map[string]time.Time) latencyStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	ds := make([]time.Duration, 0, len(commitAt))
	for k, c := range commitAt {
		if s, ok := w.seenAt[k]; ok {
			ds = append(ds, s.Sub(c))
		}
	}
	slices.Sort(ds)
	q := func(p float64) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		i := int(p*float64(len(ds))+0.999999) - 1
		return ds[min(max(i, 0), len(ds)-1)]
	}
	return latencyStats{n: len(ds), p50: q(0.50), p99: q(0.99), max: q(1)}
}
