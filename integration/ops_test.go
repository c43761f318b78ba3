package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/verify"
)

// scrape returns the samples of /metrics whose names start with prefix,
// keyed by the whole series text (name and labels).
func scrape(t testing.TB, addr, prefix string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

func readyz(addr string) (int, string) {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// TestMetricsAndReadiness scrapes /metrics under load and sees the named
// series move; /readyz turns 503 with a reason while the broker is down and
// 200 again after.
func TestMetricsAndReadiness(t *testing.T) {
	f := newFixture(t, fixtureOpts{partitions: 2})
	var addr string
	var p *proc
	// http.listen is bound first thing: a port taken meanwhile ends walpost
	// at once, and it is started again on another.
	if _, out, err := retryPort(t, func(port int) (string, error) {
		addr = fmt.Sprintf("127.0.0.1:%d", port)
		p = f.start("WALPOST_HTTP_LISTEN="+addr, "WALPOST_HTTP_READY_STALL_TIMEOUT=5s", "WALPOST_LOG_LEVEL=info")
		waitFor(t, 30*time.Second, "/readyz 200", func() bool { c, _ := readyz(addr); return c == 200 || p.exited() })
		if p.exited() {
			return tail(p.log, 30), fmt.Errorf("walpost exited: %v", p.err)
		}
		return "", nil
	}); err != nil {
		t.Fatalf("walpost with http.listen %s: %v\n%s", addr, err, out)
	}
	if resp, err := http.Get("http://" + addr + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/healthz: %v %v", resp, err)
	}
	before := scrape(t, addr, "walpost_")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l := newLoad(f, 2, 50, 5_000)
	l.start(ctx)
	expected := l.wait(t)
	waitFor(t, time.Minute, "all events produced", func() bool {
		m := scrape(t, addr, "walpost_events_produced_total")
		return m[`walpost_events_produced_total{topic="`+f.Topic+`"}`] >= 5_000
	})
	// The LSN gauges follow the next status update (≤ 200 ms after the
	// watermark moves); poll rather than race it.
	var after map[string]float64
	moved := func() (string, bool) {
		after = scrape(t, addr, "walpost_")
		for _, series := range []string{
			"walpost_events_received_total", "walpost_confirmed_lsn", "walpost_received_lsn",
			"walpost_commit_to_ack_seconds_count", "walpost_produce_latency_seconds_count",
		} {
			if after[series] <= before[series] {
				return series, false
			}
		}
		return "", true
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		series, ok := moved()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not move: %v → %v", series, before[series], after[series])
		}
		time.Sleep(100 * time.Millisecond)
	}
	if after[`walpost_state{state="streaming"}`] != 1 {
		t.Errorf("state gauge: %v", after)
	}
	for _, series := range []string{"walpost_inflight_events", "walpost_replication_lag_bytes", "walpost_slot_retained_wal_bytes", "walpost_oldest_unconfirmed_event_age_seconds"} {
		if _, ok := after[series]; !ok {
			t.Errorf("series %s missing", series)
		}
	}
	if len(scrape(t, addr, "walpost_kafka_")) == 0 {
		t.Error("no franz-go client metrics (walpost_kafka_*)")
	}
	recs := f.consumeAll(t, len(expected), time.Minute)
	if rep := verify.Validate(expected, observed(recs)); !rep.OK() {
		t.Fatalf("before the outage: %s", rep)
	}

	// Broker down: events pile up, the confirmed LSN stalls, /readyz fails.
	stackCtl(t, "kafka-stop")
	t.Cleanup(func() { stackCtl(t, "kafka-start") })
	more, err := f.writeTxn(ctx, "outage", []string{"o-1", "o-2", "o-3"}, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	var reason string
	waitFor(t, 60*time.Second, "/readyz 503 during the outage", func() bool {
		var c int
		c, reason = readyz(addr)
		return c == 503
	})
	t.Logf("readyz during the outage: %s", reason)
	if !strings.Contains(reason, "confirmed LSN has not moved") {
		t.Fatalf("readyz reason %q", reason)
	}
	stackCtl(t, "kafka-start")
	waitFor(t, 90*time.Second, "/readyz 200 after the outage", func() bool { c, _ := readyz(addr); return c == 200 })
	recs = f.consumeAll(t, len(expected)+len(more), 2*time.Minute)
	if rep := verify.Validate(append(expected, more...), observed(recs)); !rep.OK() {
		t.Fatalf("after the outage: %s", rep)
	}
	if p.exited() {
		t.Fatal("walpost exited during the outage")
	}
}

// TestLeastPrivilegeRole: the role the README recommends (REPLICATION,
// SELECT on the outbox, SELECT/INSERT/UPDATE on the poison table) runs
// `walpost run` and `walpost poison replay`.
func TestLeastPrivilegeRole(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1, topicConfig: map[string]*string{"max.message.bytes": ptr("4096")}})
	role := randName("walpost_app")
	mustExec(t, f.Pool, fmt.Sprintf(`CREATE ROLE %s LOGIN REPLICATION PASSWORD 'least-priv'`, role))
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = f.Pool.Exec(ctx, fmt.Sprintf(`DROP OWNED BY %s`, role))
		_, _ = f.Pool.Exec(ctx, fmt.Sprintf(`DROP ROLE IF EXISTS %s`, role))
	})
	mustExec(t, f.Pool, fmt.Sprintf(`GRANT SELECT ON %s TO %s`, f.Table, role))
	mustExec(t, f.Pool, fmt.Sprintf(`GRANT SELECT, INSERT, UPDATE ON %s TO %s`, f.PoisonTable, role))
	mustExec(t, f.Pool, fmt.Sprintf(`GRANT SELECT, INSERT, UPDATE ON walpost_position TO %s`, role))
	url := strings.Replace(pgURL, "walpost:walpost@", role+":least-priv@", 1)
	env := "WALPOST_POSTGRES_URL=" + url
	p := f.start(env, "WALPOST_POISON_MAX_ATTEMPTS=2", "WALPOST_POISON_BACKOFF=10ms")
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not stream as the least-privilege role")
	}
	ctx := context.Background()
	exp, err := f.writeTxn(ctx, "a", []string{"lp-1", "lp-2"}, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, f.Pool, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES ('lp-big', $1)`, f.Table), `{"b": "`+strings.Repeat("w", 6000)+`"}`)
	if !p.waitLog("event quarantined", 60*time.Second) {
		t.Fatal("oversized event not quarantined")
	}
	recs := f.consumeAll(t, 2, time.Minute)
	if rep := verify.Validate(exp, observed(recs)); !rep.OK() {
		t.Fatalf("as least-privilege role: %s", rep)
	}
	raiseMaxMessageBytes(t, f, f.Topic)
	out, err := replayPoison(t, append(f.env(), env), "--key", "lp-big")
	if err != nil || !strings.Contains(out, "replayed 1, failed 0") {
		t.Fatalf("replay as least-privilege role: %v\n%s", err, out)
	}
}

// TestHeartbeatAdvancesIdleSlot: with postgres.heartbeat_interval set,
// walpost's logical heartbeat messages reach the slot and the confirmed
// position follows the server's WAL although the outbox sees no writes.
func TestHeartbeatAdvancesIdleSlot(t *testing.T) {
	t.Parallel()
	// A cluster of its own: another test's writes would move the WAL and
	// the slot without a heartbeat.
	f := ownFixture(t, 1)
	p := f.start("WALPOST_POSTGRES_HEARTBEAT_INTERVAL=500ms")
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not stream")
	}
	// Nothing else in this test writes: the server's WAL moves because
	// walpost emits heartbeat messages.
	start := f.currentWAL()
	waitFor(t, 10*time.Second, fmt.Sprintf("server WAL past %s (heartbeats)", start), func() bool { return f.currentWAL() > start })
	target := f.currentWAL()
	waitFor(t, 15*time.Second, fmt.Sprintf("slot confirmed ≥ %s", target), func() bool {
		lsn, _, _ := f.slotState()
		return lsn >= target
	})
}
