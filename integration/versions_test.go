package integration

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestStackPostgresVersion: the stack's main cluster runs the PostgreSQL
// major PG_VERSION names (Debian's 15 when unset), its data directory and
// binaries (.stack/env) are that major's, and scripts/stack.sh status names
// the version. Run with the PG_VERSION the stack was started with.
func TestStackPostgresVersion(t *testing.T) {
	t.Parallel()
	needStack(t)
	want := 15
	if v := os.Getenv("PG_VERSION"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("PG_VERSION=%q is not a major version", v)
		}
		want = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var version string
	var num int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('server_version_num')::int`).Scan(&version, &num); err != nil {
		t.Fatal(err)
	}
	if num/10000 != want {
		t.Errorf("server_version_num = %d (PostgreSQL %s), want major %d", num, version, want)
	}
	data, bin := os.Getenv("WALPOST_STACK_PGDATA"), os.Getenv("WALPOST_STACK_PG_BIN")
	if data == "" || bin == "" {
		t.Fatal("WALPOST_STACK_PGDATA / WALPOST_STACK_PG_BIN unset: source .stack/env")
	}
	// The data directory belongs to the postgres OS user: ask the server.
	var dir string
	if err := conn.QueryRow(ctx, `SHOW data_directory`).Scan(&dir); err != nil {
		t.Fatal(err)
	}
	if filepath.Clean(dir) != filepath.Clean(data) {
		t.Errorf("server's data_directory %q, .stack/env's WALPOST_STACK_PGDATA %q", dir, data)
	}
	out, err := exec.Command(filepath.Join(bin, "postgres"), "-V").Output()
	if err != nil {
		t.Fatalf("%s/postgres -V: %v", bin, err)
	}
	if f := strings.Fields(string(out)); len(f) < 3 || !strings.HasPrefix(f[2], strconv.Itoa(want)+".") {
		t.Errorf("WALPOST_STACK_PG_BIN %s holds %q, want PostgreSQL %d", bin, strings.TrimSpace(string(out)), want)
	}
	cmd := exec.Command(filepath.Join(repoRoot, "scripts", "stack.sh"), "status")
	status, err := cmd.Output()
	if err != nil {
		t.Fatalf("stack.sh status: %v\n%s", err, status)
	}
	u, err := url.Parse(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	wantLine := "postgres: up (" + u.Host + ", " + data + ", PostgreSQL " + strings.Fields(version)[0] + ")"
	if !strings.Contains(string(status), wantLine) {
		t.Errorf("stack.sh status does not say %q:\n%s", wantLine, status)
	}
}

// TestFailoverSlot: on PostgreSQL 17+ walpost run creates its slot as a
// failover slot, and check and status say so; before 17 they say nothing
// of failover (status's failover is null). On 17+, check warns (exit 0)
// while a physical standby streams from the primary and
// synchronized_standby_slots is empty.
//
// It connects a physical standby to the stack's server, which every other
// check would see: no t.Parallel.
func TestFailoverSlot(t *testing.T) {
	f := newFixture(t, fixtureOpts{partitions: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var num int
	if err := f.Pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&num); err != nil {
		t.Fatal(err)
	}
	p := f.start()
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not stream")
	}
	// A logical replication client that has not started streaming (as
	// walpost between IDENTIFY_SYSTEM and START_REPLICATION) holds no
	// slot and is no physical standby.
	lcfg, err := pgconn.ParseConfig(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	lcfg.RuntimeParams["replication"] = "database"
	logical, err := pgconn.ConnectConfig(ctx, lcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer logical.Close(context.Background())
	if _, err := pglogrepl.IdentifySystem(ctx, logical); err != nil {
		t.Fatal(err)
	}
	st := runStatusJSON(t, f.env())
	r := runCheck(t, f.env())
	if r.Code != 0 {
		t.Errorf("check exit code %d, want 0\n%s", r.Code, r.Output)
	}
	slotLine := r.byStatus("OK")["slot"]
	if num < 170000 {
		if st.Slot.Failover != nil || st.Slot.Synced != nil {
			t.Errorf("status on %d: failover %v, synced %v, want null", num, st.Slot.Failover, st.Slot.Synced)
		}
		if slotLine == "" || strings.Contains(slotLine, "failover") {
			t.Errorf("check's slot line on %d: %q, want OK without failover", num, slotLine)
		}
		return
	}
	var failover bool
	if err := f.Pool.QueryRow(ctx, `SELECT failover FROM pg_replication_slots WHERE slot_name = $1`, f.Slot).Scan(&failover); err != nil {
		t.Fatal(err)
	}
	if !failover {
		t.Errorf("slot %s: failover = false, want true", f.Slot)
	}
	if st.Slot.Failover == nil || !*st.Slot.Failover || st.Slot.Synced == nil || *st.Slot.Synced {
		t.Errorf("status: failover %v, synced %v, want true, false", st.Slot.Failover, st.Slot.Synced)
	}
	if !strings.Contains(slotLine, "failover slot") {
		t.Errorf("check's slot line: %q, want OK naming the failover slot\n%s", slotLine, r.Output)
	}

	// A physical standby: a physical replication connection streaming
	// from the current WAL position, as a walreceiver does.
	var sync string
	if err := f.Pool.QueryRow(ctx, `SHOW synchronized_standby_slots`).Scan(&sync); err != nil {
		t.Fatal(err)
	}
	if sync != "" {
		t.Skipf("the stack's synchronized_standby_slots is %q; the warning needs it empty", sync)
	}
	cfg, err := pgconn.ParseConfig(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["replication"] = "true"
	phys, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer phys.Close(context.Background())
	sys, err := pglogrepl.IdentifySystem(ctx, phys)
	if err != nil {
		t.Fatal(err)
	}
	// A temporary physical slot, as a standby's primary_slot_name; the
	// server drops it when the connection ends.
	physSlot := randName("phys")
	if _, err := pglogrepl.CreateReplicationSlot(ctx, phys, physSlot, "", pglogrepl.CreateReplicationSlotOptions{Temporary: true, Mode: pglogrepl.PhysicalReplication}); err != nil {
		t.Fatal(err)
	}
	if err := pglogrepl.StartReplication(ctx, phys, physSlot, sys.XLogPos, pglogrepl.StartReplicationOptions{Mode: pglogrepl.PhysicalReplication}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the physical walsender in pg_stat_replication", func() bool {
		var n int
		err := f.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication r WHERE NOT EXISTS
			(SELECT 1 FROM pg_replication_slots s WHERE s.active_pid = r.pid AND s.slot_type = 'logical')`).Scan(&n)
		return err == nil && n > 0
	})
	r = runCheck(t, f.env())
	if r.Code != 0 {
		t.Errorf("check exit code %d with a warning, want 0\n%s", r.Code, r.Output)
	}
	w := r.byStatus("WARN")["slot"]
	for _, want := range []string{"failover slot", "synchronized_standby_slots is empty", "physical standby", "ALTER SYSTEM SET synchronized_standby_slots"} {
		if !strings.Contains(w, want) {
			t.Errorf("check's WARN slot line %q lacks %q\n%s", w, want, r.Output)
		}
	}
}

// TestFailoverSlotConverted: on PostgreSQL 17+ a slot that exists without
// failover (created before walpost made failover slots, or by hand) is
// made one in place when walpost starts: its position is kept, and it
// says so in its log.
func TestFailoverSlotConverted(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var num int
	if err := f.Pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&num); err != nil {
		t.Fatal(err)
	}
	if num < 170000 {
		t.Skipf("PostgreSQL %d has no failover slots", num)
	}
	var created string
	if err := f.Pool.QueryRow(ctx, `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput', false, false, false)`, f.Slot).Scan(&created); err != nil {
		t.Fatal(err)
	}
	// An event committed before walpost starts: it must still be sent
	// (the slot kept its position).
	expected, err := f.writeTxn(ctx, "before", []string{"before-0"}, `{"data": "x"}`)
	if err != nil {
		t.Fatal(err)
	}
	p := f.start()
	if !p.waitLog("made the slot a failover slot", 30*time.Second) {
		t.Fatalf("walpost did not convert the slot\n%s", tail(p.log, 40))
	}
	var failover bool
	var confirmed string
	if err := f.Pool.QueryRow(ctx, `SELECT failover, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, f.Slot).Scan(&failover, &confirmed); err != nil {
		t.Fatal(err)
	}
	if !failover {
		t.Errorf("slot %s: failover = false after walpost started, want true", f.Slot)
	}
	verifyDelivery(t, f, expected, time.Minute)
	t.Logf("slot created at %s without failover, converted; confirmed %s", created, confirmed)
}
