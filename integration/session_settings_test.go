package integration

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestSessionSettingsOfTheRole: a role whose settings would end or cancel
// sessions, as managed services and DBAs set them (idle_session_timeout
// and idle_in_transaction_session_timeout 2 s, statement_timeout and
// lock_timeout 1 s), does not end walpost's: in each delivery mode
// walpost forwards writes with a quiet period longer than the idle
// timeout in between (its side connection idle), with no session
// restart and nothing lost; walpost check names the settings it found.
func TestSessionSettingsOfTheRole(t *testing.T) {
	t.Parallel()
	alo := ownFixture(t, 3)
	mustExec(t, alo.Pool, `CREATE ROLE wp_settings LOGIN SUPERUSER PASSWORD 'wp'`)
	for _, set := range []string{"idle_session_timeout = '2s'", "idle_in_transaction_session_timeout = '2s'", "statement_timeout = '1s'", "lock_timeout = '1s'"} {
		mustExec(t, alo.Pool, "ALTER ROLE wp_settings SET "+set)
	}
	u, err := url.Parse(alo.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("wp_settings", "wp")
	asRole := "WALPOST_POSTGRES_URL=" + u.String()

	out, _ := walpostOutput(t, alo.env(asRole), "check")
	if !strings.Contains(out, "idle_session_timeout=2s") || !strings.Contains(out, "statement_timeout=1s") || !strings.Contains(out, "walpost sets each to 0") {
		t.Errorf("walpost check does not report the role's session settings:\n%s", out)
	}

	eos := newFixture(t, fixtureOpts{partitions: 3, server: alo.Server})
	for _, c := range []struct {
		name string
		f    *fixture
		env  []string
	}{
		{"at-least-once", alo, []string{asRole}},
		{"exactly-once", eos, eos.exactlyOnceEnv(asRole)},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := c.f.start(c.env...)
			waitStreaming(t, p)
			l := newWriterLoad(c.f, 2, 10, 20*time.Millisecond).start()
			l.waitWritten(t, 500, time.Minute)
			expected := l.finish(t)
			// Quiet for longer than idle_session_timeout: walpost's side
			// connection and pool sit idle.
			sleepAlive(t, p, 5*time.Second, "while the outbox was quiet")
			keys := make([]string, 50)
			for i := range keys {
				keys[i] = fmt.Sprintf("after-quiet-%d", i)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			more, err := c.f.writeTxn(ctx, "after-quiet", keys, `{"data": "after"}`)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			verifyDelivery(t, c.f, append(expected, more...), 2*time.Minute)
			if n := logCount(p, "session failed"); n != 0 {
				t.Errorf("%d session restarts under the role's settings, want 0:\n%s", n, tail(p.log, 20))
			}
			alive(t, p, "under the role's settings")
		})
	}
}

// TestSideConnectionTerminatedByAdmin: an administrator ends walpost's
// ordinary connections (pg_terminate_backend on every walpost backend that
// is not the walsender) while writers run. The server still accepts
// connections, so walpost replaces its side connection and the pool's,
// and the replication session goes on: the same walsender holds the slot,
// no session restart, nothing lost.
func TestSideConnectionTerminatedByAdmin(t *testing.T) {
	t.Parallel()
	f := stackFixture(t, 3)
	// This walpost's ordinary connections carry an application_name of
	// their own (the walsender's is "walpost").
	app := "wp_" + f.Slot
	u, err := url.Parse(f.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	p := f.start("WALPOST_POSTGRES_URL=" + u.String())
	waitStreaming(t, p)
	l := newWriterLoad(f, 2, 10, 20*time.Millisecond).start()
	l.waitWritten(t, 300, time.Minute)
	pid := slotPID(f)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// One round of terminations, of the backends there are now: killing
	// again while walpost is replacing them would also end the replacement
	// (then the session fails, by design, and retries).
	var ended int
	waitFor(t, 30*time.Second, "walpost's ordinary backends terminated", func() bool {
		err := f.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE backend_type = 'client backend' AND application_name = $1`, app).Scan(&ended)
		return err == nil && ended > 0
	})
	t.Logf("terminated %d of walpost's ordinary backends", ended)
	waitFor(t, 30*time.Second, "walpost's side connection replaced", func() bool {
		return logCount(p, "replaced it, the replication session goes on") > 0
	})
	l.waitWritten(t, 300, time.Minute)
	expected := l.finish(t)
	verifyDelivery(t, f, expected, 2*time.Minute)
	alive(t, p, "after its side connection was terminated")
	if n := logCount(p, "session failed"); n != 0 {
		t.Errorf("%d session restarts after the side connection was terminated, want 0:\n%s", n, tail(p.log, 20))
	}
	if after := slotPID(f); after != pid {
		t.Errorf("walsender holding the slot: pid %d before, %d after: the replication session ended", pid, after)
	}
}
