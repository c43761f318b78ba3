package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestLeakTestPercentiles(t *testing.T) {
	var lats []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		lats = append(lats, time.Duration(i)*time.Millisecond)
	}
	l := latencyOf(lats)
	if l.Samples != 100 || time.Duration(l.P50) != 50*time.Millisecond || time.Duration(l.P99) != 99*time.Millisecond || time.Duration(l.Max) != 100*time.Millisecond {
		t.Fatalf("latency = %+v", l)
	}
	if l := latencyOf([]time.Duration{7 * time.Millisecond}); l.P50 != l.Max || l.P99 != l.Max || l.Samples != 1 {
		t.Fatalf("one sample: %+v", l)
	}
	if l := latencyOf(nil); l != (Latency{}) {
		t.Fatalf("no samples: %+v", l)
	}
}

func TestLeakTestCommitToConsume(t *testing.T) {
	t0 := time.Unix(1000, 0)
	exp := []Expected{{Key: "a", Txn: "t1"}, {Key: "b", Txn: "t1", Index: 1}, {Key: "c", Txn: "t2"}, {Key: "d", Txn: "t3"}}
	commits := map[string]time.Time{"t1": t0, "t2": t0.Add(time.Second)}
	seen := map[string]time.Time{
		"a": t0.Add(10 * time.Millisecond),
		"b": t0.Add(30 * time.Millisecond),
		"c": t0.Add(time.Second - time.Millisecond), // fetched before COMMIT returned: 0
		"d": t0.Add(time.Hour),                      // no commit time (never committed): ignored
	}
	l := CommitToConsume(exp, commits, seen)
	if l.Samples != 3 || l.P50 != Millis(10*time.Millisecond) || l.Max != Millis(30*time.Millisecond) {
		t.Fatalf("latency = %+v", l)
	}
}

func TestLeakTestPerPartition(t *testing.T) {
	s := cleanStream(10, 4, 2)
	s.swapKeys(t, "t3-r1", "t4-r1") // partition 1 only
	dup := s.observed[0]
	dup.Offset = 100
	obs := append(s.observed, dup)
	parts := PerPartition(s.expected, obs, map[int32]int64{0: 0, 1: 0, 2: 42})
	if len(parts) != 3 {
		t.Fatalf("partitions = %+v", parts)
	}
	p0, p1, p2 := parts[0], parts[1], parts[2]
	if p0.Partition != 0 || p0.Records != 21 || p0.Delivered != 20 || p0.Duplicates != 1 || p0.OutOfOrder != 0 {
		t.Fatalf("partition 0 = %+v", p0)
	}
	if p1.Partition != 1 || p1.Records != 20 || p1.Delivered != 20 || p1.OutOfOrder == 0 || len(p1.Violations) != p1.OutOfOrder {
		t.Fatalf("partition 1 = %+v", p1)
	}
	if p2.Partition != 2 || p2.StartOffset != 42 || p2.Records != 0 {
		t.Fatalf("partition 2 = %+v", p2)
	}
	// The split agrees with the whole verdict.
	if whole := Validate(s.expected, obs); len(whole.OutOfOrder) != p0.OutOfOrder+p1.OutOfOrder {
		t.Fatalf("whole %d out of order, partitions %d + %d", len(whole.OutOfOrder), p0.OutOfOrder, p1.OutOfOrder)
	}
}

func TestLeakTestKeysAndPayload(t *testing.T) {
	l := &LeakTest{PostgresURL: "postgres://x", Brokers: []string{"b:1"}, Topic: "t", Events: 1, Writers: 1, MaxTxnSize: 1, PayloadBytes: 300, Timeout: time.Second}
	if err := l.defaults(); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^walpost-verify-[0-9a-f]{8}-$`).MatchString(l.Prefix()) {
		t.Fatalf("prefix %q", l.Prefix())
	}
	p := l.Payload()
	if len(p) != 300 || !json.Valid([]byte(p)) || !strings.Contains(p, l.RunID) {
		t.Fatalf("payload (%d bytes) %q", len(p), p)
	}
	l.PayloadBytes = 0
	if p := l.Payload(); !json.Valid([]byte(p)) {
		t.Fatalf("small payload %q", p)
	}
	other := &LeakTest{PostgresURL: "postgres://x", Brokers: []string{"b:1"}, Topic: "t", Events: 1, Writers: 1, MaxTxnSize: 1, Timeout: time.Second}
	_ = other.defaults()
	if other.RunID == l.RunID {
		t.Fatal("two runs share a run id")
	}
}

func TestLeakTestRejectsBadParameters(t *testing.T) {
	l := &LeakTest{Events: 0, Writers: 0, MaxTxnSize: 0, Timeout: 0}
	_, err := l.Run(context.Background())
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"PostgreSQL URL", "brokers", "topic", "events = 0", "writers = 0", "txn size = 0", "timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q: %v", want, err)
		}
	}
}

func sampleResult() *Result {
	return &Result{
		RunID: "0badf00d", Table: `"public"."outbox"`, Topic: "outbox", Events: 100, Writers: 4, MaxTxnSize: 20, PayloadBytes: 200,
		Written: 100, Transactions: 11, WriteElapsed: Millis(120 * time.Millisecond),
		Delivered: 100, Partitions: []PartitionResult{{Partition: 0, Records: 60, Delivered: 60}, {Partition: 1, Records: 40, Delivered: 40}},
		Latency: Latency{Samples: 100, P50: Millis(12 * time.Millisecond), P99: Millis(40 * time.Millisecond), Max: Millis(41 * time.Millisecond)},
		Timeout: Millis(2 * time.Minute), Elapsed: Millis(1500 * time.Millisecond), OK: true,
	}
}

func TestLeakTestReportText(t *testing.T) {
	var b bytes.Buffer
	r := sampleResult()
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, re := range []string{`written\s+100 events in 11 transactions`, `delivered\s+100\n`, `lost\s+0\n`, `duplicated\s+0 \(0 keys\)`, `out of order\s+0\n`,
		`commit to consume\s+p50 12ms\s+p99 40ms\s+max 41ms`, `(?m)^PASS: nothing lost`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("report lacks %s:\n%s", re, out)
		}
	}

	r = sampleResult()
	r.Delivered, r.Lost, r.LostKeys, r.OK, r.TimedOut, r.NothingArrived = 0, 100, []string{"k1", "k2"}, false, true, true
	r.Latency = Latency{}
	r.Timeout = Millis(5 * time.Second)
	b.Reset()
	_ = r.WriteText(&b)
	out = b.String()
	for _, re := range []string{`lost\s+100\n`, `lost k1\n`, `Nothing of this run arrived on topic outbox within 5s`, `walpost run`, `(?m)^FAIL: 100 lost`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("report lacks %s:\n%s", re, out)
		}
	}

	r = sampleResult()
	r.OutOfOrder, r.OK = 1, false
	r.Partitions[1].OutOfOrder, r.Partitions[1].Violations = 1, []string{"partition 1: a (commit 0/2) after b (commit 0/3)"}
	b.Reset()
	_ = r.WriteText(&b)
	if out := b.String(); !strings.Contains(out, "out of order: partition 1: a (commit 0/2)") || !strings.Contains(out, "FAIL: 1 out of order") {
		t.Errorf("report:\n%s", out)
	}
}

func TestLeakTestReportJSON(t *testing.T) {
	var b bytes.Buffer
	if err := sampleResult().WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	lat, _ := got["commit_to_consume"].(map[string]any)
	if got["ok"] != true || got["lost"] != 0.0 || got["delivered"] != 100.0 || lat["p99_ms"] != 40.0 || got["elapsed_ms"] != 1500.0 {
		t.Fatalf("json: %s", b.String())
	}
	if parts, _ := got["partitions"].([]any); len(parts) != 2 {
		t.Fatalf("partitions: %s", fmt.Sprint(got["partitions"]))
	}
}

// TestLeakTestExactlyOnceDuplicateFails: a duplicate copy passes in
// at-least-once mode and fails the run in exactly-once mode, with a
// verdict that says why.
func TestLeakTestExactlyOnceDuplicateFails(t *testing.T) {
	for _, exactlyOnce := range []bool{false, true} {
		l := &LeakTest{Events: 2, Topic: "outbox", ExactlyOnce: exactlyOnce, Isolation: IsolationReadCommitted}
		ws := &writeState{expected: []Expected{{Key: "k1", Txn: "t1", Index: 0}, {Key: "k2", Txn: "t1", Index: 1}}, txns: 1,
			commits: map[string]time.Time{"t1": time.Now()}}
		cs := &consumeState{observed: []Observed{{Key: "k1", Partition: 0, Offset: 0}, {Key: "k2", Partition: 0, Offset: 1}, {Key: "k2", Partition: 0, Offset: 2}},
			firstSeen: map[string]time.Time{}}
		res := &Result{Events: 2}
		l.summarise(res, ws, cs, map[int32]int64{0: 0})
		if res.Duplicates != 1 || res.OK == exactlyOnce {
			t.Fatalf("exactly-once %v: duplicates %d, ok %v; want 1 duplicate and ok %v", exactlyOnce, res.Duplicates, res.OK, !exactlyOnce)
		}
		var b bytes.Buffer
		_ = res.WriteText(&b)
		want := `(?m)^PASS: nothing lost, order held per partition \(1 duplicate copies: allowed, at-least-once\)`
		if exactlyOnce {
			want = `(?m)^FAIL: 1 duplicated \(delivery.mode exactly-once promises none to read_committed consumers\)`
		}
		if !regexp.MustCompile(want).MatchString(b.String()) {
			t.Errorf("exactly-once %v: report lacks %s:\n%s", exactlyOnce, want, b.String())
		}
	}
}
