package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walpost/walpost/verify"
)

// Tests of walpost's own position (walpost_position, DESIGN.md "Position").

// writeEvents commits n events in transactions of 10 and returns them.
func writeEvents(t *testing.T, f *fixture, prefix string, n int) []verify.Expected {
	t.Helper()
	var out []verify.Expected
	for i := 0; i < n; i += 10 {
		txn := fmt.Sprintf("%s-t%d", prefix, i/10)
		keys := make([]string, 0, 10)
		for j := i; j < i+10 && j < n; j++ {
			keys = append(keys, fmt.Sprintf("%s-%d", prefix, j))
		}
		exp, err := f.writeTxn(context.Background(), txn, keys, `{"x": 1}`)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, exp...)
	}
	return out
}

// waitExit waits up to timeout for p to exit and returns its exit code
// (-1: still running, then killed).
func waitExit(p *proc, timeout time.Duration) int {
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.kill()
		return -1
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err == nil {
		return 0
	}
	return -2
}

func positionLog(p *proc) string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// forgetPosition deletes the fixture's position row when the test ends.
func forgetPosition(t *testing.T, pool *pgxpool.Pool, slot string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = pool.Exec(ctx, `DELETE FROM walpost_position WHERE slot = $1`, slot)
	})
}

// TestSlotDroppedWhileDownRefuses: walpost confirms events, stops; the
// slot is dropped and writes go on. The next walpost run exits 1 naming
// the gap and walpost recover, and creates no slot (today's walpost
// created a new slot at the current position and silently lost every
// event in the gap); walpost check fails the position check the same way.
func TestSlotDroppedWhileDownRefuses(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 3})
	forgetPosition(t, f.Pool, f.Slot)
	p := f.start()
	waitStreaming(t, p)
	writeEvents(t, f, "before", 200)
	target := f.currentWAL()
	waitFor(t, time.Minute, "the slot to confirm the first events", func() bool {
		lsn, _, ok := f.slotState()
		return ok && lsn >= target
	})
	if _, err := p.signal(syscall.SIGTERM, time.Minute); err != nil {
		t.Fatalf("walpost did not stop: %v", err)
	}
	waitFor(t, 30*time.Second, "the slot to be released", func() bool {
		_, active, _ := f.slotState()
		return !active
	})
	mustExec(t, f.Pool, `SELECT pg_drop_replication_slot($1)`, f.Slot)
	writeEvents(t, f, "gap", 300)

	p2 := f.start()
	code := waitExit(p2, time.Minute)
	log := positionLog(p2)
	if code != 1 {
		t.Errorf("walpost run after the slot was dropped: exit code %d, want 1 (-1: still running)\n%s", code, tail(p2.log, 20))
	}
	for _, want := range []string{fmt.Sprintf(`slot %q does not exist`, f.Slot), "walpost had confirmed up to LSN", "last confirmed transaction committed at", "walpost recover"} {
		if !strings.Contains(log, want) {
			t.Errorf("walpost's log lacks %q:\n%s", want, tail(p2.log, 20))
		}
	}
	if _, _, exists := f.slotState(); exists {
		t.Errorf("walpost re-created slot %s over the gap", f.Slot)
	}
	r := runCheck(t, f.env())
	expectFailures(t, r, map[string][]string{"position": {"does not exist", "walpost recover", "exported snapshot"}})
}

// TestOtherSystemIdentifierRefused: the URL reaches another cluster (a
// scratch one) whose walpost_position row was recorded on the stack's
// cluster, as after a logical restore or pg_upgrade. walpost run exits 1
// with a clear error, creates no slot and leaves the row as it was.
func TestOtherSystemIdentifierRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1})
	var sysid int64
	if err := f.Pool.QueryRow(context.Background(), `SELECT system_identifier FROM pg_control_system()`).Scan(&sysid); err != nil {
		t.Fatal(err)
	}
	scratchURL := scratchServer(t, "logical").url
	env := []string{
		"WALPOST_POSTGRES_URL=" + scratchURL,
		"WALPOST_POSTGRES_TABLE=outbox",
		"WALPOST_POSTGRES_POISON_TABLE=poison_outbox",
		"WALPOST_POSTGRES_PUBLICATION=walpost_outbox",
		"WALPOST_POSTGRES_SLOT=walpost",
	}
	if err := runWalpost(t, env, "migrate"); err != nil {
		t.Fatalf("migrate the scratch cluster: %v", err)
	}
	scratch, err := pgxpool.New(context.Background(), scratchURL)
	if err != nil {
		t.Fatal(err)
	}
	defer scratch.Close()
	// The position as the stack's cluster would have left it.
	mustExec(t, scratch, `INSERT INTO walpost_position (slot, system_identifier, timeline, confirmed_lsn, last_commit_at, updated_at)
VALUES ('walpost', $1, 1, '0/5000000', '2026-12-01 10:00:00+00', now())`, sysid)
	mustExec(t, scratch, `INSERT INTO outbox (idempotency_key, payload) VALUES ('k1', '{}')`)

	p := f.start(env...)
	code := waitExit(p, time.Minute)
	log := positionLog(p)
	if code != 1 {
		t.Errorf("walpost run against another cluster: exit code %d, want 1 (-1: still running)\n%s", code, tail(p.log, 20))
	}
	for _, want := range []string{"different PostgreSQL cluster", fmt.Sprint(sysid), "0/5000000", "walpost recover"} {
		if !strings.Contains(log, want) {
			t.Errorf("walpost's log lacks %q:\n%s", want, tail(p.log, 20))
		}
	}
	var slots int
	if err := scratch.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots`).Scan(&slots); err != nil {
		t.Fatal(err)
	}
	if slots != 0 {
		t.Errorf("%d slot(s) created on the other cluster", slots)
	}
	var lsn string
	var gotSys int64
	if err := scratch.QueryRow(context.Background(), `SELECT confirmed_lsn::text, system_identifier FROM walpost_position WHERE slot = 'walpost'`).Scan(&lsn, &gotSys); err != nil {
		t.Fatal(err)
	}
	if lsn != "0/5000000" || gotSys != sysid {
		t.Errorf("position row changed to %s on %d; nothing may be confirmed on another cluster", lsn, gotSys)
	}
	r := runCheck(t, append(f.env(), env...))
	expectFailures(t, r, map[string][]string{"position": {"different PostgreSQL cluster", fmt.Sprint(sysid)}})
}

var (
	behindRE    = regexp.MustCompile(`position_lsn=(\S+)`)
	confirmedRE = regexp.MustCompile(`msg=confirmed slot=\S+ lsn=(\S+)`)
)

// TestPostgresCrashResendsOnlyUnrecorded: PostgreSQL 15 crashes (immediate
// stop) under load from 8 writers and starts again. Nothing is lost, and
// every event sent twice belongs to a transaction that was not yet covered
// by walpost's stored position when PostgreSQL crashed (its commit LSN is
// at or past the stored LSN): what the slot re-sends below it is skipped.
// And since walpost itself did not crash, it skips what it confirmed since
// the last write as well (INV-13): at most one position interval's worth of
// events is sent again. Without the position walpost re-sent everything
// since PostgreSQL's last checkpoint (about 14,000 events here), without
// INV-13 up to 9,713.
func TestPostgresCrashResendsOnlyUnrecorded(t *testing.T) {
	t.Parallel()
	f := ownFixture(t, 3)
	forgetPosition(t, f.Pool, f.Slot)
	p := f.start()
	waitStreaming(t, p)
	loadStart := time.Now()
	l := newWriterLoad(f, 8, crashMaxTxn, 0).start()
	l.waitWritten(t, 20000, 3*time.Minute)

	f.pg(t, "pg-stop", "immediate")
	crashed := l.written.Load()
	rate := float64(crashed) / time.Since(loadStart).Seconds()
	// The bound: what one position interval (postgres.position_interval,
	// 200 ms by default) confirms at the load's rate, and at least one
	// transaction (a session that ends inside one sends it again).
	bound := max(crashMaxTxn, int(rate*0.2))
	t.Logf("PostgreSQL crashed (immediate stop) after %d events (%.0f events/s: one position interval is %d events)", crashed, rate, bound)
	sleepAlive(t, p, 2*time.Second, "while PostgreSQL was down")
	f.pg(t, "pg-start")
	// The stored position as the crash left it: read at once, before
	// walpost's new session can move it (a later read is only larger, which
	// makes the check below weaker, never wrong).
	var stored pglogrepl.LSN
	var storedErr error
	for try := 0; try < 50; try++ {
		var s string
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		storedErr = f.Pool.QueryRow(ctx, `SELECT confirmed_lsn::text FROM walpost_position WHERE slot = $1`, f.Slot).Scan(&s)
		cancel()
		if storedErr == nil {
			stored, _ = pglogrepl.ParseLSN(s)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitStreamingAgain(t, p, 1, time.Minute)
	l.waitWritten(t, 5000, 2*time.Minute)
	expected := l.finish(t)
	recs := consumeExpected(t, f, expected, 5*time.Minute)
	rep := verify.Validate(expected, recs)
	t.Logf("validator: %s", rep)
	if !rep.OK() || rep.Unexpected != 0 {
		t.Errorf("delivery failed: %s", rep)
	}
	alive(t, p, "after the crash")
	if storedErr != nil {
		t.Fatalf("reading walpost's stored position after the restart: %v", storedErr)
	}
	// The session may have read an older row than the one read above only
	// if walpost moved it first; the skip boundary it logged is the one it
	// used.
	if m := behindRE.FindStringSubmatch(positionLog(p)); m != nil {
		if lsn, err := pglogrepl.ParseLSN(m[1]); err == nil && lsn < stored {
			stored = lsn
		}
	}
	// The last position confirmed to the slot before the crash (debug
	// log): re-sent events below it were confirmed and not yet recorded;
	// those at or above it were in flight, unconfirmed, when PostgreSQL
	// crashed, and at-least-once sends them again whatever is recorded.
	var lastConfirmed pglogrepl.LSN
	before, _, _ := strings.Cut(positionLog(p), "session failed")
	for _, m := range confirmedRE.FindAllStringSubmatch(before, -1) {
		if lsn, err := pglogrepl.ParseLSN(m[1]); err == nil && lsn > lastConfirmed {
			lastConfirmed = lsn
		}
	}
	seen := map[string]int{}
	covered := 0    // copies beyond the first of events below the stored position
	unrecorded := 0 // ... between the stored and the last confirmed position
	for _, r := range recs {
		seen[r.Key]++
		if seen[r.Key] > 1 {
			switch {
			case r.CommitLSN < stored:
				covered++
			case r.CommitLSN < lastConfirmed:
				unrecorded++
			}
		}
	}
	t.Logf("re-sent events confirmed after the last position write: %d; in flight (unconfirmed) at the crash: %d (last confirmed %s)",
		unrecorded, rep.Duplicates()-covered-unrecorded, lastConfirmed)
	skippedLine := "no skip (the slot was not behind)"
	if strings.Contains(positionLog(p), "skipped events already confirmed") {
		skippedLine = regexp.MustCompile(`msg="skipped events already confirmed[^\n]*`).FindString(positionLog(p))
	}
	t.Logf("re-sent after the crash: %d events (%d keys); stored position at the crash %s; %s", rep.Duplicates(), len(rep.Duplicated), stored, skippedLine)
	if covered != 0 {
		t.Errorf("%d re-sent events belong to transactions below the stored position %s: they were confirmed before the crash and must be skipped", covered, stored)
	}
	// INV-13: walpost outlived the crash, so it skips what it confirmed
	// whether or not the position was written in time, and what was in
	// flight (flushed before the next session): only the transaction the
	// stream was inside when the session ended is sent again.
	t.Logf("bound: one transaction (%d events); one position interval at the load's rate would be %d", crashMaxTxn, bound)
	if rep.Duplicates() > crashMaxTxn {
		t.Errorf("%d events re-sent after the crash, want at most one transaction's (%d): walpost confirmed the rest before PostgreSQL came back", rep.Duplicates(), crashMaxTxn)
	}
}

// crashMaxTxn is the largest transaction of the crash test's load.
const crashMaxTxn = 20
