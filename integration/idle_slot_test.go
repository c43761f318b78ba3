package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// TestRecoverAfterIdleSlotTimeout: on PostgreSQL 18 with
// idle_replication_slot_timeout = 1s, walpost check warns that the
// timeout is shorter than postgres.outage_budget; walpost stops, events
// are written, and the next checkpoint invalidates the idle slot
// (invalidation_reason = idle_timeout). walpost run refuses, naming the
// invalidation and walpost recover; recover closes the gap (rows chosen by
// the snapshot recorded with the position): 0 lost.
func TestRecoverAfterIdleSlotTimeout(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 3})
	srv := scratchServer(t, "logical", "PG_VERSION=18")
	url := srv.url
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	mustExec(t, pool, `ALTER SYSTEM SET idle_replication_slot_timeout = '1s'`)
	mustExec(t, pool, `SELECT pg_reload_conf()`)
	env := []string{"WALPOST_POSTGRES_URL=" + url, "WALPOST_POSTGRES_TABLE=outbox", "WALPOST_POSTGRES_POISON_TABLE=poison_outbox",
		"WALPOST_POSTGRES_PUBLICATION=walpost_outbox"}
	if err := runWalpost(t, env, "migrate"); err != nil {
		t.Fatalf("migrate the scratch cluster: %v", err)
	}
	w := &fixture{t: t, Pool: pool, Table: "outbox"}

	before := runThenStop(t, f, w, env, "before", 200)
	out, _ := walpostOutput(t, append(f.env(), env...), "check")
	if !strings.Contains(out, "idle_replication_slot_timeout is 1s") || !strings.Contains(out, "postgres.outage_budget") {
		t.Errorf("walpost check does not warn that idle_replication_slot_timeout is shorter than postgres.outage_budget:\n%s", out)
	}
	gap := writeEvents(t, w, "gap", 300)
	reason := func() string {
		var r *string
		_ = pool.QueryRow(context.Background(), `SELECT invalidation_reason FROM pg_replication_slots WHERE slot_name = $1`, f.Slot).Scan(&r)
		if r == nil {
			return ""
		}
		return *r
	}
	// The slot is invalidated by the first checkpoint after it has been
	// idle for longer than the timeout.
	waitFor(t, time.Minute, "the idle slot invalidated by a checkpoint", func() bool {
		mustExec(t, pool, `CHECKPOINT`)
		return reason() == "idle_timeout"
	})
	var walStatus *string
	_ = pool.QueryRow(context.Background(), `SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1`, f.Slot).Scan(&walStatus)
	t.Logf("slot invalidated: invalidation_reason idle_timeout, wal_status %v", deref(walStatus))
	out, _ = walpostOutput(t, append(f.env(), env...), "check")
	if !strings.Contains(out, "idle_replication_slot_timeout") || !strings.Contains(out, "walpost recover") {
		t.Errorf("walpost check on the invalidated slot does not name the timeout and walpost recover:\n%s", out)
	}
	gap = append(gap, writeEvents(t, w, "gap2", 100)...)
	p := f.start(env...)
	if code := waitExit(p, time.Minute); code != 1 || !strings.Contains(positionLog(p), "idle_replication_slot_timeout") {
		t.Errorf("walpost run on the slot invalidated by idle_replication_slot_timeout: exit %d, want 1 naming the setting\n%s", code, tail(p.log, 10))
	}
	recoverAndCheck(t, f, w, env, before, gap, "transaction snapshot")
}
