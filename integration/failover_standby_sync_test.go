package integration

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestStandbySlotSyncReported: on a stack with a standby (PG_VERSION=17
// PG_STANDBY=1 make stack-up; run by scripts/test-failover.sh before the
// failover test), a failover slot created on the primary has no synced
// copy on the standby at first: walpost check warns "failover not yet
// protected" naming the standby. walpost run reports
// walpost_slot_standby_synced{standby} 0 and then 1 (with
// /readyz's detail and the log saying so); check then names the synced
// copy. The time from the slot's creation to "protected" is logged.
func TestStandbySlotSyncReported(t *testing.T) {
	standbyURL := os.Getenv("WALPOST_STACK_STANDBY_URL")
	if standbyURL == "" {
		t.Skip("needs a standby: PG_VERSION=17 PG_STANDBY=1 make stack-up")
	}
	su, err := url.Parse(standbyURL)
	if err != nil {
		t.Fatal(err)
	}
	standby := su.Host
	f := newFixture(t, fixtureOpts{partitions: 3})
	// The slot, a failover slot, as walpost run would create it.
	created := time.Now()
	mustExec(t, f.Pool, `SELECT pg_create_logical_replication_slot($1, 'pgoutput', false, false, true)`, f.Slot)
	out, _ := walpostOutput(t, f.env(), "check")
	if !strings.Contains(out, "failover not yet protected") || !strings.Contains(out, "standby "+standby) {
		t.Errorf("walpost check right after the slot's creation does not warn that standby %s has no synced copy:\n%s", standby, out)
	}

	var addr string
	var p *proc
	if _, out, err := retryPort(t, func(port int) (string, error) {
		addr = fmt.Sprintf("127.0.0.1:%d", port)
		p = f.start("WALPOST_HTTP_LISTEN="+addr, "WALPOST_LOG_LEVEL=info")
		if p.waitLog("msg=streaming", 30*time.Second) {
			return "", nil
		}
		return tail(p.log, 20), fmt.Errorf("walpost did not start streaming")
	}); err != nil {
		t.Fatalf("walpost: %v\n%s", err, out)
	}
	series := fmt.Sprintf(`walpost_slot_standby_synced{standby=%q}`, standby)
	sawUnsynced := false
	l := newWriterLoad(f, 2, 5, 20*time.Millisecond).start()
	sb, err := pgx.Connect(context.Background(), standbyURL)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())
	waitFor(t, 2*time.Minute, "the standby's synced, persistent copy of the slot", func() bool {
		if v, ok := scrape(t, addr, "walpost_slot_standby_synced")[series]; ok && v == 0 {
			sawUnsynced = true
		}
		var ok bool
		err := sb.QueryRow(context.Background(), `SELECT synced AND NOT temporary FROM pg_replication_slots WHERE slot_name = $1`, f.Slot).Scan(&ok)
		return err == nil && ok
	})
	protectedAfter := time.Since(created)
	t.Logf("standby %s: synced, persistent copy of the slot %s after the slot's creation", standby, protectedAfter.Round(10*time.Millisecond))
	// walpost reads the standbys with a back-off up to 30 s while a copy
	// is missing.
	waitFor(t, time.Minute, "walpost_slot_standby_synced 1", func() bool {
		v, ok := scrape(t, addr, "walpost_slot_standby_synced")[series]
		return ok && v == 1
	})
	t.Logf("walpost_slot_standby_synced 1 after %s", time.Since(created).Round(10*time.Millisecond))
	expected := l.finish(t)
	if !sawUnsynced && logCount(p, "failover not yet protected") == 0 {
		t.Errorf("walpost never reported the standby's copy as not yet synced (metric 0 or the log line)")
	}
	if logCount(p, "failover protected: every standby") != 1 {
		t.Errorf("walpost did not log once that failover is protected:\n%s", tail(p.log, 20))
	}
	if code, body := readyz(addr); code != 200 || strings.Contains(body, "not yet protected") {
		t.Errorf("/readyz once protected: %d %q, want 200 without \"not yet protected\"", code, body)
	}
	out, _ = walpostOutput(t, f.env(), "check")
	if !strings.Contains(out, "standby "+standby+" has a synced copy of the slot") || strings.Contains(out, "not yet protected") {
		t.Errorf("walpost check after the sync does not name the synced copy on %s:\n%s", standby, out)
	}
	verifyDelivery(t, f, expected, 2*time.Minute)
}
