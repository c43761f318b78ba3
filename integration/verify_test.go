package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func mustMatch(t *testing.T, out string, res ...string) {
	t.Helper()
	for _, re := range res {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("output lacks %s", re)
		}
	}
	if t.Failed() {
		t.Fatalf("output:\n%s", out)
	}
}

// TestVerifyPasses: with walpost forwarding, `walpost verify --events 5000`
// exits 0 and reports nothing lost; it ignores records already on the topic
// and deletes its rows afterwards.
func TestVerifyPasses(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 3})
	p := f.start()
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not start streaming")
	}
	// Something already on the topic: verify must start after it.
	if _, err := f.writeTxn(context.Background(), "before", []string{"before-1", "before-2"}, `{}`); err != nil {
		t.Fatal(err)
	}
	f.consumeAll(t, 2, 30*time.Second)

	out, err := walpostOutput(t, f.env(), "verify", "--events", "5000")
	t.Logf("walpost verify:\n%s", out)
	if code := exitCode(err); code != 0 {
		t.Fatalf("walpost verify exited %d (%v), want 0", code, err)
	}
	mustMatch(t, out, `written\s+5000 events`, `delivered\s+5000\n`, `lost\s+0\n`, `out of order\s+0\n`,
		`commit to consume\s+p50 \S+\s+p99 \S+\s+max \S+\s+\(5000 events\)`, `(?m)^PASS: nothing lost`)
	var left int
	if err := f.Pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*) FROM %s WHERE idempotency_key LIKE 'walpost-verify-%%'`, f.Table)).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d verify rows left in %s", left, f.Table)
	}

	// The JSON report of a second, smaller run on the same topic.
	out, err = walpostOutput(t, f.env(), "verify", "--events", "300", "--writers", "2", "--txn-size", "50", "--payload-bytes", "1000", "--json")
	if code := exitCode(err); code != 0 {
		t.Fatalf("walpost verify --json exited %d (%v):\n%s", code, err, out)
	}
	var rep struct {
		OK         bool `json:"ok"`
		Written    int  `json:"written"`
		Delivered  int  `json:"delivered"`
		Lost       int  `json:"lost"`
		OutOfOrder int  `json:"out_of_order"`
		Partitions []struct {
			Partition   int32 `json:"partition"`
			StartOffset int64 `json:"start_offset"`
		} `json:"partitions"`
		Latency struct {
			Samples int     `json:"samples"`
			P99     float64 `json:"p99_ms"`
		} `json:"commit_to_consume"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	var starts int64
	for _, p := range rep.Partitions {
		starts += p.StartOffset
	}
	if !rep.OK || rep.Written != 300 || rep.Delivered != 300 || rep.Lost != 0 || rep.OutOfOrder != 0 ||
		len(rep.Partitions) != 3 || starts < 5002 || rep.Latency.Samples != 300 || rep.Latency.P99 <= 0 {
		t.Fatalf("json report: %+v\n%s", rep, out)
	}
}

// TestVerifyNothingForwarding: without a walpost run, verify times out,
// reports every event lost and says nothing arrived, and exits non-zero.
func TestVerifyNothingForwarding(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 3})
	start := time.Now()
	out, err := walpostOutput(t, f.env(), "verify", "--events", "500", "--timeout", "5s")
	t.Logf("walpost verify (%s):\n%s", time.Since(start).Round(time.Millisecond), out)
	if code := exitCode(err); code != 1 {
		t.Fatalf("walpost verify exited %d (%v), want 1", code, err)
	}
	mustMatch(t, out, `written\s+500 events`, `delivered\s+0\n`, `lost\s+500\n`, `Nothing of this run arrived on topic `+regexp.QuoteMeta(f.Topic)+` within 5s`,
		`(?m)^FAIL: 500 lost`)
	if took := time.Since(start); took > 3*time.Minute {
		t.Fatalf("verify took %s with a 5s timeout", took)
	}
}

// TestVerifyMissingTopic: a topic that does not exist is an error that
// says so (exit 2), before anything is written.
func TestVerifyMissingTopic(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1})
	out, err := walpostOutput(t, f.env("WALPOST_KAFKA_TOPIC=no_such_topic_"+strings.ToLower(randName("x"))), "verify", "--events", "10")
	if code := exitCode(err); code != 2 || !strings.Contains(out, "does not exist") {
		t.Fatalf("exit %d (%v), output:\n%s", code, err, out)
	}
	var n int
	if err := f.Pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*) FROM %s`, f.Table)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d rows written despite the missing topic", n)
	}
}

// TestVerifyExactlyOnce: against an exactly-once walpost, verify reads
// with read_committed by default and passes with no duplicate; asking it
// for read_uncommitted in that mode is refused (exit 2).
func TestVerifyExactlyOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 3})
	env := append(f.env(), f.exactlyOnceEnv()...)
	p := f.start(f.exactlyOnceEnv()...)
	if !p.waitLog("msg=streaming", 60*time.Second) {
		t.Fatal("walpost did not start streaming")
	}
	out, err := walpostOutput(t, env, "verify", "--events", "3000", "--json")
	if code := exitCode(err); code != 0 {
		t.Fatalf("walpost verify exited %d (%v):\n%s", code, err, out)
	}
	var rep struct {
		OK          bool   `json:"ok"`
		Delivered   int    `json:"delivered"`
		Duplicates  int    `json:"duplicates"`
		Isolation   string `json:"isolation"`
		ExactlyOnce bool   `json:"exactly_once"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	t.Logf("verify: %+v", rep)
	if !rep.OK || rep.Delivered != 3000 || rep.Duplicates != 0 || rep.Isolation != "read_committed" || !rep.ExactlyOnce {
		t.Fatalf("json report: %+v\n%s", rep, out)
	}
	out, err = walpostOutput(t, env, "verify", "--events", "10", "--isolation", "read_uncommitted")
	if code := exitCode(err); code != 2 || !strings.Contains(out, "use --isolation read_committed") {
		t.Fatalf("verify --isolation read_uncommitted in exactly-once mode: exit %d, output:\n%s", code, out)
	}
}
