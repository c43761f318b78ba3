package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// These tests start `walpost run` against a misconfigured database and
// check that it stops at once (no reconnect loop) with a non-zero exit code
// and a message that says what is wrong and how to fix it (DESIGN.md, PostgreSQL facts).

// runTimeout bounds one `walpost run`; a fatal setup error must stop it
// well within this.
const runTimeout = 30 * time.Second

// runToExit runs `walpost run` with the stack's environment plus env until it
// exits, failing the test if it does not exit within runTimeout or exits
// 0. It returns the combined output and the exit code.
func runToExit(t *testing.T, env []string) (string, int) {
	t.Helper()
	needStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "run")
	cmd.SysProcAttr = childAttr()
	cmd.Env = append(baseEnv(), env...)
	cmd.WaitDelay = 5 * time.Second
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	start := time.Now()
	err := cmd.Run()
	out := buf.String()
	t.Logf("walpost run exited after %s (%v); output:\n%s", time.Since(start).Round(time.Millisecond), err, out)
	if ctx.Err() != nil {
		t.Fatalf("walpost run did not exit within %s", runTimeout)
	}
	if err == nil {
		t.Fatal("walpost run exited 0; want a non-zero exit code")
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("walpost run: %v", err)
	}
	return out, ee.ExitCode()
}

// assertStopped checks a fatal stop: non-zero exit, no retry loop, and
// every want in the output.
func assertStopped(t *testing.T, out string, code int, wants ...string) {
	t.Helper()
	if code <= 0 {
		t.Errorf("exit code = %d, want > 0", code)
	}
	if strings.Contains(out, "reconnecting") {
		t.Errorf("walpost retried a fatal error instead of stopping")
	}
	if !strings.Contains(out, "walpost stopped") {
		t.Errorf("output lacks the final %q log line", "walpost stopped")
	}
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q", w)
		}
	}
}

// newTopicName returns a unique topic name for `walpost run` to create
// (kafka.create_topic_partitions) and deletes it in cleanup.
func newTopicName(t *testing.T) string {
	t.Helper()
	topic := randName("errs_topic")
	t.Cleanup(func() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
		if err != nil {
			return
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = kadm.NewClient(cl).DeleteTopics(ctx, topic)
	})
	return topic
}

// connect opens a connection that cleanup closes.
func connect(t *testing.T, connString string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func execConn(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// withUser returns base with its user and password replaced.
func withUser(t *testing.T, base, user, password string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, password)
	return u.String()
}

func slotExists(t *testing.T, conn *pgx.Conn, slot string) bool {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// TestRunErrorBadCredentials: a wrong password stops walpost with a message
// pointing at postgres.url, and the password is not printed.
func TestRunErrorBadCredentials(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1})
	u, err := url.Parse(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	password := "wrongPw" + strings.TrimPrefix(randName("x"), "x_")
	bad := withUser(t, pgURL, u.User.Username(), password)
	out, code := runToExit(t, f.env("WALPOST_POSTGRES_URL="+bad))
	assertStopped(t, out, code, "password authentication failed", "postgres.url", "WALPOST_POSTGRES_URL")
	if strings.Contains(out, password) {
		t.Errorf("output contains the password %q", password)
	}
	if _, _, ok := f.slotState(); ok {
		t.Errorf("slot %s exists after a failed login", f.Slot)
	}
}

// TestRunErrorWalLevelNotLogical: on a cluster with wal_level = replica,
// walpost stops and says to set wal_level = logical and restart.
func TestRunErrorWalLevelNotLogical(t *testing.T) {
	t.Parallel()
	scratch := scratchServer(t, "replica").url
	if err := runWalpost(t, []string{"WALPOST_POSTGRES_URL=" + scratch}, "migrate"); err != nil {
		t.Fatalf("walpost migrate on wal_level=replica: %v", err)
	}
	topic := newTopicName(t)
	out, code := runToExit(t, []string{
		"WALPOST_POSTGRES_URL=" + scratch,
		"WALPOST_KAFKA_TOPIC=" + topic,
		"WALPOST_KAFKA_CREATE_TOPIC_PARTITIONS=1",
		"WALPOST_HTTP_LISTEN=",
	})
	assertStopped(t, out, code, `wal_level is "replica"`, "wal_level = logical", "restart PostgreSQL")
}

// TestRefusesPostgres13: walpost check and walpost run on PostgreSQL 13
// (a scratch cluster of the Maven build 13.23.0) exit 1 naming the
// version, before anything else is read: walpost needs 14 or newer.
func TestRefusesPostgres13(t *testing.T) {
	t.Parallel()
	scratch := scratchServer(t, "logical", "PG_VERSION=13").url
	topic := newTopicName(t)
	env := []string{"WALPOST_POSTGRES_URL=" + scratch, "WALPOST_KAFKA_TOPIC=" + topic}
	// run creates the topic before it connects to PostgreSQL.
	out, code := runToExit(t, append(env, "WALPOST_KAFKA_CREATE_TOPIC_PARTITIONS=1", "WALPOST_HTTP_LISTEN="))
	if code != 1 {
		t.Errorf("walpost run exit code %d, want 1", code)
	}
	assertStopped(t, out, code, "PostgreSQL 13.23", "walpost needs PostgreSQL 14 or newer")
	// check: the version fails, the other PostgreSQL checks are moot.
	r := runCheck(t, env)
	expectFailures(t, r, map[string][]string{"postgres": {"PostgreSQL 13.23", "server_version_num 1300", "walpost needs PostgreSQL 14 or newer"}})
	if d := r.byStatus("SKIP")["wal_level"]; !strings.Contains(d, "PostgreSQL 13.23 is not supported") {
		t.Errorf("wal_level check: %q, want SKIP naming the version", d)
	}
}

// TestRunErrorRoleWithoutReplication: a login role with SELECT on the
// outbox but without REPLICATION stops walpost with ALTER ROLE … REPLICATION,
// both when the slot must still be created and when it already exists (the
// replication connection itself is refused).
func TestRunErrorRoleWithoutReplication(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1})
	role := randName("norepl")
	password := "pw" + strings.TrimPrefix(randName("x"), "x_")
	mustExec(t, f.Pool, fmt.Sprintf(`CREATE ROLE %s LOGIN NOREPLICATION PASSWORD '%s'`, role, password))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Terminate any session of the role left behind, then drop it
		// (DROP OWNED revokes its grants in this database).
		_, _ = f.Pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, role)
		if _, err := f.Pool.Exec(ctx, fmt.Sprintf(`DROP OWNED BY %s`, role)); err != nil {
			t.Errorf("drop owned by %s: %v", role, err)
		}
		for i := 0; ; i++ {
			_, err := f.Pool.Exec(ctx, fmt.Sprintf(`DROP ROLE IF EXISTS %s`, role))
			if err == nil {
				break
			}
			if i == 50 {
				t.Errorf("drop role %s: %v", role, err)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	mustExec(t, f.Pool, fmt.Sprintf(`GRANT USAGE ON SCHEMA public TO %s`, role))
	mustExec(t, f.Pool, fmt.Sprintf(`GRANT SELECT ON %s TO %s`, f.Table, role))
	env := f.env("WALPOST_POSTGRES_URL=" + withUser(t, pgURL, role, password))

	check := func(t *testing.T) {
		out, code := runToExit(t, env)
		assertStopped(t, out, code, "SQLSTATE 42501", "ALTER ROLE", "REPLICATION")
		if strings.Contains(out, password) {
			t.Errorf("output contains the role's password")
		}
	}
	t.Run("slot missing", func(t *testing.T) {
		// Prepare tries to create the slot, which needs REPLICATION.
		check(t)
		if _, _, ok := f.slotState(); ok {
			t.Errorf("slot %s was created by a role without REPLICATION", f.Slot)
		}
	})
	t.Run("slot exists", func(t *testing.T) {
		// The checks pass; the walsender connection is refused.
		mustExec(t, f.Pool, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, f.Slot)
		check(t)
		if _, _, ok := f.slotState(); !ok {
			t.Errorf("slot %s disappeared", f.Slot)
		}
	})
}

// TestRunErrorPublicationMissing: a publication that does not exist stops
// walpost before it creates the slot, with the CREATE PUBLICATION to run.
func TestRunErrorPublicationMissing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1})
	out, code := runToExit(t, f.env("WALPOST_POSTGRES_PUBLICATION=does_not_exist"))
	assertStopped(t, out, code, `publication "does_not_exist" does not exist`,
		"CREATE PUBLICATION does_not_exist FOR TABLE", f.Table, "publish = 'insert'")
	// The slot must come after the publication (DESIGN.md, PostgreSQL facts).
	if _, _, ok := f.slotState(); ok {
		t.Errorf("slot %s was created although the publication is missing", f.Slot)
	}
}

// TestRunErrorSlotLost: a slot invalidated by max_slot_wal_keep_size
// (wal_status = lost) stops walpost with the pg_drop_replication_slot to run;
// walpost neither drops nor re-creates the slot itself.
func TestRunErrorSlotLost(t *testing.T) {
	t.Parallel()
	scratch := scratchServer(t, "logical").url
	if err := runWalpost(t, []string{"WALPOST_POSTGRES_URL=" + scratch}, "migrate"); err != nil {
		t.Fatalf("walpost migrate: %v", err)
	}
	conn := connect(t, scratch)
	slot := randName("lost")
	execConn(t, conn, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot)
	execConn(t, conn, `ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'`)
	execConn(t, conn, `SELECT pg_reload_conf()`)

	walStatus := func() string {
		var s *string
		err := conn.QueryRow(context.Background(), `SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&s)
		if errors.Is(err, pgx.ErrNoRows) {
			return "(no slot)"
		}
		if err != nil {
			t.Fatal(err)
		}
		if s == nil {
			return "(null)"
		}
		return *s
	}
	deadline := time.Now().Add(2 * time.Minute)
	for round := 0; walStatus() != "lost"; round++ {
		if time.Now().After(deadline) {
			t.Fatalf("slot %s still has wal_status %q after %d rounds of WAL", slot, walStatus(), round)
		}
		execConn(t, conn, `CREATE TABLE IF NOT EXISTS junk AS SELECT generate_series(1, 50000) g`)
		execConn(t, conn, `INSERT INTO junk SELECT generate_series(1, 50000)`)
		execConn(t, conn, `SELECT pg_switch_wal()`)
		execConn(t, conn, `CHECKPOINT`)
	}

	topic := newTopicName(t)
	out, code := runToExit(t, []string{
		"WALPOST_POSTGRES_URL=" + scratch,
		"WALPOST_POSTGRES_SLOT=" + slot,
		"WALPOST_KAFKA_TOPIC=" + topic,
		"WALPOST_KAFKA_CREATE_TOPIC_PARTITIONS=1",
		"WALPOST_HTTP_LISTEN=",
	})
	assertStopped(t, out, code, "lost", fmt.Sprintf("pg_drop_replication_slot('%s')", slot))
	if got := walStatus(); got != "lost" {
		t.Errorf("after walpost run the slot's wal_status is %s; walpost must leave the lost slot alone", got)
	}
	if !slotExists(t, conn, slot) {
		t.Errorf("walpost dropped the lost slot %s", slot)
	}
}
