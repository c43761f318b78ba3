package integration

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walpost/walpost/verify"
)

// Tests of walpost recover and walpost prune (README, Runbook, "Slot lost").

// rowWriter commits transactions of 10 events into w's table until stop,
// one at a time (so commit order is created_at order), and returns what it
// wrote.
type rowWriter struct {
	w      *fixture
	prefix string
	stop   chan struct{}
	done   chan struct{}

	mu  sync.Mutex
	exp []verify.Expected
	err error
}

func startWriter(w *fixture, prefix string) *rowWriter {
	r := &rowWriter{w: w, prefix: prefix, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for i := 0; ; i++ {
			select {
			case <-r.stop:
				return
			default:
			}
			keys := make([]string, 10)
			for j := range keys {
				keys[j] = fmt.Sprintf("%s-%d-%d", prefix, i, j)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			exp, err := w.writeTxn(ctx, fmt.Sprintf("%s-t%d", prefix, i), keys, `{"x": 2}`)
			cancel()
			r.mu.Lock()
			r.exp, r.err = append(r.exp, exp...), err
			r.mu.Unlock()
			if err != nil {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return r
}

func (r *rowWriter) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.exp)
}

func (r *rowWriter) finish(t *testing.T) []verify.Expected {
	t.Helper()
	close(r.stop)
	<-r.done
	if r.err != nil {
		t.Fatalf("writer %s: %v", r.prefix, r.err)
	}
	return r.exp
}

// recoveryCommand runs a walpost command to completion and returns its output
// and exit code.
func recoveryCommand(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	out, err := walpostOutput(t, env, args...)
	t.Logf("walpost %s:\n%s", strings.Join(args, " "), out)
	if err == nil {
		return out, 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return out, ee.ExitCode()
	}
	t.Fatalf("walpost %s: %v", strings.Join(args, " "), err)
	return out, -1
}

var (
	rowsRE   = regexp.MustCompile(`rows: +(\d+) found in the slot's snapshot, (\d+) produced`)
	resentRE = regexp.MustCompile(`re-sent: +(\d+) row`)
	dryRE    = regexp.MustCompile(`rows: +(\d+) found now`)
)

func queryInt(t *testing.T, re *regexp.Regexp, out string, group int) int {
	t.Helper()
	m := re.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("report lacks %s:\n%s", re, out)
	}
	n, _ := strconv.Atoi(m[group])
	return n
}

// stopAndLose runs walpost until it confirmed n events, stops it with
// SIGTERM and waits for the slot to be released.
func runThenStop(t *testing.T, f *fixture, w *fixture, env []string, prefix string, n int) []verify.Expected {
	t.Helper()
	p := f.start(env...)
	waitStreaming(t, p)
	exp := writeEvents(t, w, prefix, n)
	var target string
	if err := w.Pool.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&target); err != nil {
		t.Fatal(err)
	}
	slotOf := func() (confirmed bool, active bool) {
		var ok, act bool
		err := w.Pool.QueryRow(context.Background(), `SELECT confirmed_flush_lsn >= $2::pg_lsn, active FROM pg_replication_slots WHERE slot_name = $1`, f.Slot, target).Scan(&ok, &act)
		return err == nil && ok, err == nil && act
	}
	waitFor(t, time.Minute, "the slot to confirm the first events", func() bool { ok, _ := slotOf(); return ok })
	if _, err := p.signal(syscall.SIGTERM, time.Minute); err != nil {
		t.Fatalf("walpost did not stop: %v", err)
	}
	waitFor(t, 30*time.Second, "the slot to be released", func() bool { _, act := slotOf(); return !act })
	return exp
}

// recoverAndCheck is the part both acceptance tests share: walpost run
// refuses the gap; walpost recover --dry-run plans it; walpost recover
// produces it while writes go on; walpost run streams the rest. Every
// committed event is in Kafka, first occurrences are in order per
// partition, the report's counts match the topic, and the only duplicates
// are the rows the report says it re-sent.
func recoverAndCheck(t *testing.T, f, w *fixture, env []string, before, gap []verify.Expected, wantBy string) {
	t.Helper()
	p := f.start(env...)
	if code := waitExit(p, time.Minute); code != 1 {
		t.Fatalf("walpost run over the gap: exit code %d, want 1\n%s", code, tail(p.log, 20))
	}
	if log := positionLog(p); !strings.Contains(log, "walpost recover") {
		t.Errorf("walpost run's refusal does not name walpost recover:\n%s", tail(p.log, 10))
	}

	out, code := recoveryCommand(t, append(f.env(), env...), "recover", "--dry-run")
	if code != 0 {
		t.Fatalf("walpost recover --dry-run: exit %d", code)
	}
	if n := queryInt(t, dryRE, out, 1); n < len(gap) {
		t.Errorf("dry run plans %d rows, want at least the %d of the gap", n, len(gap))
	}
	for _, want := range []string{"dry run", wantBy, "rows deleted before the snapshot"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run lacks %q", want)
		}
	}
	var exists bool
	if err := w.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = $1 AND wal_status <> 'lost')`, f.Slot).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("the dry run created slot %s", f.Slot)
	}

	// Writes go on during the recovery: each of them is either in the
	// snapshot (recovered) or after the consistent point (streamed).
	live := startWriter(w, "during")
	waitFor(t, 30*time.Second, "writes before recover", func() bool { return live.count() >= 50 })
	out, code = recoveryCommand(t, append(f.env(), env...), "recover")
	if code != 0 {
		t.Fatalf("walpost recover: exit %d", code)
	}
	found, produced := queryInt(t, rowsRE, out, 1), queryInt(t, rowsRE, out, 2)
	resent := queryInt(t, resentRE, out, 1)
	if found != produced {
		t.Errorf("report: found %d, produced %d; want equal", found, produced)
	}
	if !strings.Contains(out, wantBy) {
		t.Errorf("report lacks %q", wantBy)
	}
	atRecover := live.count()
	waitFor(t, 30*time.Second, "writes after recover", func() bool { return live.count() >= atRecover+50 })

	p3 := f.start(env...)
	waitStreaming(t, p3)
	time.Sleep(time.Second)
	during := live.finish(t)
	after := writeEvents(t, w, "after", 50)
	expected := append(append(append(append([]verify.Expected{}, before...), gap...), during...), after...)
	recs := f.consumeAll(t, len(expected), 3*time.Minute)
	rep := verify.Validate(expected, observed(recs))
	t.Logf("validator: %s; recovered %d, of which re-sent %d", rep, produced, resent)
	if !rep.OK() || rep.Unexpected != 0 {
		t.Errorf("delivery after recover: %s", rep)
	}
	recovered, streamed := map[string]int{}, map[string]int{}
	for _, r := range recs {
		if r.Headers["walpost_recovered"] == "true" {
			recovered[r.Key]++
		} else {
			streamed[r.Key]++
		}
	}
	if len(recovered) != produced {
		t.Errorf("%d distinct keys carry walpost_recovered, the report says %d produced", len(recovered), produced)
	}
	for _, e := range gap {
		if recovered[e.Key] != 1 || streamed[e.Key] != 0 {
			t.Errorf("gap event %s: recovered %d, streamed %d times; want recovered once", e.Key, recovered[e.Key], streamed[e.Key])
			break
		}
	}
	for _, e := range append(during, after...) {
		if recovered[e.Key]+streamed[e.Key] != 1 {
			t.Errorf("event %s written during or after recover: recovered %d, streamed %d; want exactly one copy (no overlap at the consistent point)", e.Key, recovered[e.Key], streamed[e.Key])
			break
		}
	}
	// By the transaction snapshot the report's count is an upper bound:
	// a row inserted under a savepoint of a transaction in progress at
	// the snapshot reads as ended there and is counted, never delivered.
	if exact := wantBy != "transaction snapshot"; (exact && rep.Duplicates() != resent) || rep.Duplicates() > resent {
		t.Errorf("%d duplicates in Kafka, the report re-sent %d", rep.Duplicates(), resent)
	}
	var recovering *time.Time
	if err := w.Pool.QueryRow(context.Background(), `SELECT recovering_since FROM walpost_position WHERE slot = $1`, f.Slot).Scan(&recovering); err != nil || recovering != nil {
		t.Errorf("position row after recover: recovering_since %v, err %v; want NULL", recovering, err)
	}
	alive(t, p3, "after recover")
}

// TestRecoverAfterSlotDropped: walpost confirms events and stops; the slot
// is dropped and writes go on (track_commit_timestamp off, and a position
// row without a snapshot, as a walpost before snapshots recorded it: rows
// chosen by created_at minus recover.margin). walpost run refuses; after
// walpost recover and walpost run, every event is in Kafka exactly as the
// report says.
func TestRecoverAfterSlotDropped(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 3})
	forgetPosition(t, f.Pool, f.Slot)
	before := runThenStop(t, f, f, nil, "before", 200)
	mustExec(t, f.Pool, `UPDATE walpost_position SET snapshot = NULL, snapshot_lsn = NULL, next_snapshot = NULL, next_snapshot_lsn = NULL WHERE slot = $1`, f.Slot)
	mustExec(t, f.Pool, `SELECT pg_drop_replication_slot($1)`, f.Slot)
	gap := writeEvents(t, f, "gap", 300)
	recoverAndCheck(t, f, f, nil, before, gap, "created_at at or after")
}

// TestRecoverAfterSlotInvalidated: on a scratch cluster with
// track_commit_timestamp on and max_slot_wal_keep_size 1MB, walpost stops,
// events and WAL go on until the slot is invalidated (wal_status = lost).
// walpost recover drops the lost slot, creates it again and produces the
// rows chosen by commit timestamp.
func TestRecoverAfterSlotInvalidated(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 3})
	srv := scratchServer(t, "logical")
	url := srv.url
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, pool, `ALTER SYSTEM SET track_commit_timestamp = on`)
	mustExec(t, pool, `ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'`)
	pool.Close()
	// A restart turns track_commit_timestamp on.
	if err := srv.ctl("pg-restart"); err != nil {
		t.Fatal(err)
	}
	env := []string{"WALPOST_POSTGRES_URL=" + url, "WALPOST_POSTGRES_TABLE=outbox", "WALPOST_POSTGRES_POISON_TABLE=poison_outbox",
		"WALPOST_POSTGRES_PUBLICATION=walpost_outbox"}
	if err := runWalpost(t, env, "migrate"); err != nil {
		t.Fatalf("migrate the scratch cluster: %v", err)
	}
	pool, err = pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var on string
	if err := pool.QueryRow(context.Background(), `SHOW track_commit_timestamp`).Scan(&on); err != nil || on != "on" {
		t.Fatalf("track_commit_timestamp = %q (%v), want on", on, err)
	}
	w := &fixture{t: t, Pool: pool, Table: "outbox"}

	before := runThenStop(t, f, w, env, "before", 200)
	gap := writeEvents(t, w, "gap", 300)
	walStatus := func() string {
		var s *string
		_ = pool.QueryRow(context.Background(), `SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1`, f.Slot).Scan(&s)
		if s == nil {
			return "(none)"
		}
		return *s
	}
	deadline := time.Now().Add(2 * time.Minute)
	for walStatus() != "lost" {
		if time.Now().After(deadline) {
			t.Fatalf("slot still %s", walStatus())
		}
		mustExec(t, pool, `CREATE TABLE IF NOT EXISTS junk AS SELECT generate_series(1, 50000) g`)
		mustExec(t, pool, `INSERT INTO junk SELECT generate_series(1, 50000)`)
		mustExec(t, pool, `SELECT pg_switch_wal()`)
		mustExec(t, pool, `CHECKPOINT`)
	}
	gap = append(gap, writeEvents(t, w, "gap2", 100)...)
	recoverAndCheck(t, f, w, env, before, gap, "commit timestamp (track_commit_timestamp = on)")
}

// TestPruneOnlyConfirmed: walpost confirms 300 events and stops; a backlog
// of 200 is written while it is down. walpost prune deletes exactly the
// confirmed rows (in batches of --batch), never the backlog; with the
// default recover.margin (rows chosen by created_at) it keeps the rows of
// the last 10 minutes; without a position it refuses.
func TestPruneOnlyConfirmed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1})
	noRow := append(f.env(), "WALPOST_POSTGRES_SLOT=nothing_recorded_here")
	if out, code := recoveryCommand(t, noRow, "prune", "--older-than", "1ms"); code != 1 || !strings.Contains(out, "no position is recorded") {
		t.Errorf("prune without a position: exit %d, want 1 naming the missing position", code)
	}
	if out, code := recoveryCommand(t, f.env(), "prune"); code != 2 || !strings.Contains(out, "--older-than is required") {
		t.Errorf("prune without --older-than: exit %d, want 2 naming the flag", code)
	}
	forgetPosition(t, f.Pool, f.Slot)
	confirmed := runThenStop(t, f, f, nil, "old", 300)
	backlog := writeEvents(t, f, "backlog", 200)
	count := func(prefix string) int {
		var n int
		if err := f.Pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*) FROM %s WHERE idempotency_key LIKE $1`, f.Table), prefix+"-%").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	out, code := recoveryCommand(t, f.env(), "prune", "--older-than", "1ms")
	if code != 0 || !strings.Contains(out, "deleted:           0 row(s)") {
		t.Errorf("prune with the default recover.margin (10m): exit %d, want 0 rows deleted", code)
	}
	noMargin := append(f.env(), "WALPOST_RECOVER_MARGIN=0s")
	out, code = recoveryCommand(t, noMargin, "prune", "--older-than", "1ms", "--dry-run")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d row(s) would be deleted", len(confirmed))) {
		t.Errorf("prune --dry-run: exit %d, want %d rows planned", code, len(confirmed))
	}
	if n := count("old"); n != len(confirmed) {
		t.Fatalf("the dry run deleted rows: %d of %d left", n, len(confirmed))
	}
	out, code = recoveryCommand(t, noMargin, "prune", "--older-than", "1ms", "--batch", "7")
	if code != 0 {
		t.Fatalf("prune: exit %d", code)
	}
	if want := fmt.Sprintf("deleted:           %d row(s) in %d batch(es)", len(confirmed), (len(confirmed)+6)/7); !strings.Contains(out, want) {
		t.Errorf("prune report lacks %q", want)
	}
	if n := count("old"); n != 0 {
		t.Errorf("%d confirmed rows left after prune, want 0", n)
	}
	if n := count("backlog"); n != len(backlog) {
		t.Errorf("prune deleted unconfirmed rows: %d of the backlog's %d left", n, len(backlog))
	}
}
