package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/verify"
)

// consumeRdkafka reads topic from the start with librdkafka (the
// confluent-kafka binding, scripts/rdkafka.sh: a client walpost did not
// write) at the given isolation level until expect records arrived, or
// no record came for idle after the last one, or timeout passed.
// With linger it reads on after expect records until none came for
// linger, so records beyond those expected (duplicates) are seen too.
func consumeRdkafka(t testing.TB, topic, isolation string, expect int, linger, idle, timeout time.Duration) []record {
	t.Helper()
	cmd := exec.Command(filepath.Join(repoRoot, "scripts", "rdkafka.sh"), "consume",
		"--brokers", strings.Join(brokers, ","), "--topic", topic, "--isolation", isolation,
		"--expect", fmt.Sprint(expect), "--linger", fmt.Sprint(linger.Seconds()),
		"--idle", fmt.Sprint(idle.Seconds()), "--timeout", fmt.Sprint(timeout.Seconds()))
	cmd.Dir = repoRoot
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var out []record
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var m struct {
			Partition int32             `json:"partition"`
			Offset    int64             `json:"offset"`
			Key       *string           `json:"key"`
			Headers   map[string]string `json:"headers"`
			Value     *string           `json:"value"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("librdkafka consumer printed %q: %v", sc.Text(), err)
		}
		r := record{Observed: verify.Observed{Partition: m.Partition, Offset: m.Offset}, Headers: m.Headers}
		if m.Key != nil {
			r.Key = *m.Key
		}
		if m.Value != nil {
			r.Value = []byte(*m.Value)
		}
		r.CommitLSN, _ = pglogrepl.ParseLSN(m.Headers["commit_lsn"])
		out = append(out, r)
	}
	if err != nil && len(out) < expect {
		t.Logf("librdkafka consumer: %v\n%s", err, stderr.String())
	}
	t.Logf("librdkafka consumer (%s): %d records; %s", isolation, len(out), strings.TrimSpace(lastLine(stderr.String())))
	return out
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// TestLibrdkafkaConsumer: what walpost produces reads back through
// librdkafka, a client walpost did not write, with read_committed: every
// event once, keyed by its idempotency_key with the same header, in commit
// order per partition.
func TestLibrdkafkaConsumer(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 3})
	p := f.start()
	waitStreaming(t, p)
	var expected []verify.Expected
	for n := 0; n < 40; n++ {
		keys := make([]string, 1+n%25)
		for i := range keys {
			keys[i] = fmt.Sprintf("rd-t%d-r%d-é☕", n, i)
		}
		exp, err := f.writeTxn(t.Context(), fmt.Sprintf("rd-t%d", n), keys, `{"data": "<x&y>"}`)
		if err != nil {
			t.Fatal(err)
		}
		expected = append(expected, exp...)
	}
	recs := consumeRdkafka(t, f.Topic, "read_committed", len(expected), 3*time.Second, 5*time.Second, 3*time.Minute)
	rep := verify.Validate(expected, observed(recs))
	t.Logf("validator: %s", rep)
	if !rep.OK() || rep.Unexpected != 0 || rep.Duplicates() != 0 {
		t.Errorf("through librdkafka: %s", rep)
	}
	for _, r := range recs {
		if r.Headers["idempotency_key"] != r.Key || string(r.Value) != `{"data": "<x&y>"}` {
			t.Errorf("record %q: idempotency_key header %q, value %q", r.Key, r.Headers["idempotency_key"], r.Value)
			break
		}
	}
}
