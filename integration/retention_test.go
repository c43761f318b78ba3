package integration

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRetentionPrunesWhileRunning: walpost run with outbox.retention 2s
// (recover.margin 0s, a pass every 200ms) deletes the rows it delivered
// once they are older than the retention, never a younger row, and never
// a row it has not confirmed: a row routed to a topic that does not exist
// holds the position, and neither it nor the rows committed after it are
// deleted, however old they get. A trigger records every deleted row with
// the time of its deletion; walpost_outbox_pruned_rows_total counts them.
func TestRetentionPrunesWhileRunning(t *testing.T) {
	t.Parallel()
	const retention = 2 * time.Second
	f := newFixture(t, fixtureOpts{partitions: 1})
	ctx := context.Background()
	audit, fn := "deleted_"+f.Table, "audit_"+f.Table
	mustExec(t, f.Pool, fmt.Sprintf(`CREATE TABLE %s (idempotency_key text NOT NULL, created_at timestamptz NOT NULL, deleted_at timestamptz NOT NULL DEFAULT clock_timestamp())`, audit))
	mustExec(t, f.Pool, fmt.Sprintf(`CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO %s (idempotency_key, created_at) VALUES (OLD.idempotency_key, OLD.created_at); RETURN OLD; END $$`, fn, audit))
	mustExec(t, f.Pool, fmt.Sprintf(`CREATE TRIGGER audit AFTER DELETE ON %s FOR EACH ROW EXECUTE FUNCTION %s()`, f.Table, fn))
	t.Cleanup(func() {
		_, _ = f.Pool.Exec(context.Background(), fmt.Sprintf(`DROP FUNCTION IF EXISTS %s() CASCADE`, fn))
		_, _ = f.Pool.Exec(context.Background(), fmt.Sprintf(`DROP TABLE IF EXISTS %s`, audit))
	})
	missing := randName("missing")
	count := func(table, where string, args ...any) int {
		t.Helper()
		var n int
		if err := f.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE %s`, table, where), args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	var addr string
	var p *proc
	if _, out, err := retryPort(t, func(port int) (string, error) {
		addr = fmt.Sprintf("127.0.0.1:%d", port)
		p = f.start("WALPOST_HTTP_LISTEN="+addr, "WALPOST_OUTBOX_RETENTION="+retention.String(),
			"WALPOST_OUTBOX_PRUNE_INTERVAL=200ms", "WALPOST_OUTBOX_PRUNE_BATCH=7", "WALPOST_RECOVER_MARGIN=0s")
		if !p.waitLog("msg=streaming", 30*time.Second) {
			return tail(p.log, 30), fmt.Errorf("walpost did not stream: %v", p.err)
		}
		return "", nil
	}); err != nil {
		t.Fatalf("walpost with http.listen %s: %v\n%s", addr, err, out)
	}
	if !strings.Contains(positionLog(p), `key=outbox.retention`) {
		t.Errorf("walpost does not log its outbox retention at start:\n%s", tail(p.log, 30))
	}

	old := writeEvents(t, f, "old", 100)
	oldDone := time.Now()
	if recs := f.consumeAll(t, len(old), time.Minute); len(recs) < len(old) {
		t.Fatalf("%d of %d old events delivered", len(recs), len(old))
	}
	// With commit timestamps only rows committed 1 s before the last
	// confirmed commit go: confirm a later one.
	time.Sleep(time.Until(oldDone.Add(1100 * time.Millisecond)))
	young := writeEvents(t, f, "young", 50)
	waitFor(t, 2*time.Minute, "the old rows to be pruned", func() bool { return count(f.Table, `idempotency_key LIKE 'old-%'`) == 0 })

	// The unconfirmed rows: one Kafka refuses (no such topic), which walpost
	// never confirms, and the transactions committed after it.
	mustExec(t, f.Pool, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload, topic) VALUES ('held-routed', '{}', $1)`, f.Table), missing)
	after := writeEvents(t, f, "held", 20)
	heldAt := time.Now()
	if !p.waitLog("does not exist: create it", 90*time.Second) {
		t.Fatalf("walpost did not stop at the row for the missing topic:\n%s", tail(p.log, 30))
	}
	// Two passes that began after the held rows were older than the
	// retention (the first line counted after that instant may come from
	// a pass that began before it).
	time.Sleep(time.Until(heldAt.Add(retention + 500*time.Millisecond)))
	passes := logCount(p, `msg="pruned the outbox"`)
	waitFor(t, 3*time.Minute, "two more prune passes", func() bool {
		alive(t, p, "while held")
		return logCount(p, `msg="pruned the outbox"`) >= passes+2
	})

	if n := count(f.Table, `idempotency_key LIKE 'held-%'`); n != len(after)+1 {
		t.Errorf("%d of the %d unconfirmed rows left: walpost pruned past its position", n, len(after)+1)
	}
	if n := count(audit, `idempotency_key LIKE 'held-%'`); n != 0 {
		t.Errorf("%d unconfirmed rows deleted", n)
	}
	if n := count(audit, `idempotency_key LIKE 'old-%'`); n != len(old) {
		t.Errorf("%d old rows deleted, want all %d", n, len(old))
	}
	if n := count(audit, `created_at >= deleted_at - $1::interval`, retention.String()); n != 0 {
		t.Errorf("%d rows deleted younger than the retention %s", n, retention)
	}
	delivered := map[string]bool{}
	for _, r := range f.consumeAll(t, len(old)+len(young), time.Minute) {
		delivered[r.Key] = true
	}
	rows, err := f.Pool.Query(ctx, fmt.Sprintf(`SELECT idempotency_key FROM %s`, audit))
	if err != nil {
		t.Fatal(err)
	}
	deleted := 0
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		deleted++
		if !delivered[k] {
			t.Errorf("row %s deleted but not in Kafka", k)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Nothing more is deletable now (the held row keeps the position); the
	// counter follows the pass that deleted the last rows.
	waitFor(t, 30*time.Second, "walpost_outbox_pruned_rows_total to count the deleted rows", func() bool {
		return scrape(t, addr, "walpost_outbox_pruned_rows_total")["walpost_outbox_pruned_rows_total"] == float64(deleted)
	})
	if m := scrape(t, addr, "walpost_outbox_prune_errors_total"); m["walpost_outbox_prune_errors_total"] != 0 {
		t.Errorf("walpost_outbox_prune_errors_total = %v, want 0:\n%s", m, tail(p.log, 30))
	}
	if !strings.Contains(positionLog(p), `level=INFO msg="pruned the outbox"`) || !strings.Contains(positionLog(p), "created_before=") {
		t.Errorf("no info line with the rows deleted and the cut-off:\n%s", tail(p.log, 30))
	}
	if _, err := p.signal(syscall.SIGTERM, time.Minute); err != nil {
		t.Fatalf("walpost did not stop on SIGTERM: %v\n%s", err, tail(p.log, 30))
	}
}
