package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/status"
)

// runStatusJSON runs walpost status --json and decodes its output.
func runStatusJSON(t *testing.T, env []string) status.Report {
	t.Helper()
	cmd := exec.Command(binary, "status", "--json")
	cmd.SysProcAttr = childAttr()
	cmd.Env = append(baseEnv(), env...)
	out, err := cmd.Output() // stdout only: the JSON
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("walpost status --json: %v\n%s%s", err, out, ee.Stderr)
		}
		t.Fatalf("walpost status --json: %v", err)
	}
	var s status.Report
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("status --json is not JSON: %v\n%s", err, out)
	}
	return s
}

func parseLSN(t *testing.T, what string, s *string) pglogrepl.LSN {
	t.Helper()
	if s == nil {
		t.Fatalf("%s is null", what)
	}
	l, err := pglogrepl.ParseLSN(*s)
	if err != nil {
		t.Fatalf("%s %q: %v", what, *s, err)
	}
	return l
}

// TestStatusWhileForwarding: with walpost running and events delivered,
// `walpost status --json` shows the active slot confirmed past the last
// delivered commit, a small lag, the topic's partitions with end offsets
// summing to the delivered count, and nothing quarantined.
func TestStatusWhileForwarding(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 3})
	p := f.start("WALPOST_POSTGRES_STATUS_INTERVAL=1s")
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not start streaming")
	}
	ctx := context.Background()
	var want int
	for txn := 0; txn < 3; txn++ {
		keys := make([]string, 7)
		for i := range keys {
			keys[i] = fmt.Sprintf("status-%d-%d", txn, i)
		}
		exp, err := f.writeTxn(ctx, fmt.Sprint(txn), keys, `{"n": 1}`)
		if err != nil {
			t.Fatal(err)
		}
		want += len(exp)
	}
	recs := f.consumeAll(t, want, time.Minute)
	if len(recs) != want {
		t.Fatalf("consumed %d records, want %d", len(recs), want)
	}
	var lastCommit pglogrepl.LSN
	for _, r := range recs {
		lastCommit = max(lastCommit, r.CommitLSN)
	}
	waitFor(t, 30*time.Second, fmt.Sprintf("slot confirmed past %s", lastCommit), func() bool {
		lsn, _, _ := f.slotState()
		return lsn > lastCommit
	})

	// The lag is measured against the server's WAL end, which other
	// writers on the shared stack move too; walpost confirms it from
	// keepalives, so poll until it is small.
	const smallLag = 16 << 20
	var s status.Report
	deadline := time.Now().Add(30 * time.Second)
	for {
		s = runStatusJSON(t, f.env())
		if s.Slot.LagBytes != nil && *s.Slot.LagBytes < smallLag || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}

	if s.Slot.Name != f.Slot || !s.Slot.Exists || s.Slot.Error != nil {
		t.Fatalf("slot: %+v", s.Slot)
	}
	if s.Slot.Active == nil || !*s.Slot.Active || s.Slot.ActivePID == nil || *s.Slot.ActivePID <= 0 {
		t.Fatalf("slot not shown active with a pid: active=%v pid=%v", s.Slot.Active, s.Slot.ActivePID)
	}
	confirmed := parseLSN(t, "slot.confirmed_flush_lsn", s.Slot.ConfirmedFlushLSN)
	if confirmed <= lastCommit {
		t.Fatalf("confirmed_flush_lsn %s not past the last delivered commit %s", confirmed, lastCommit)
	}
	restart := parseLSN(t, "slot.restart_lsn", s.Slot.RestartLSN)
	parseLSN(t, "postgres.current_wal_lsn", s.Postgres.CurrentWALLSN)
	if s.Slot.LagBytes == nil || *s.Slot.LagBytes < 0 || *s.Slot.LagBytes >= smallLag {
		t.Fatalf("lag_bytes = %v, want 0 ≤ lag < %d", s.Slot.LagBytes, smallLag)
	}
	// Lag and retained WAL come from one query: restart ≤ confirmed means
	// retained ≥ lag, by exactly the distance between the two.
	if s.Slot.RetainedWALBytes == nil || *s.Slot.RetainedWALBytes-*s.Slot.LagBytes != int64(confirmed-restart) {
		t.Fatalf("retained_wal_bytes = %v with lag %d, want lag + (confirmed %s − restart %s)", s.Slot.RetainedWALBytes, *s.Slot.LagBytes, confirmed, restart)
	}
	if s.Slot.WALStatus == nil || *s.Slot.WALStatus == "lost" {
		t.Fatalf("wal_status = %v", s.Slot.WALStatus)
	}

	if s.Publication.Name != f.Publication || !s.Publication.Exists ||
		!slices.Equal(s.Publication.Tables, []string{"public." + f.Table}) || !slices.Equal(s.Publication.Operations, []string{"insert"}) {
		t.Fatalf("publication: %+v", s.Publication)
	}
	if s.Outbox.Table != "public."+f.Table || s.Outbox.RowEstimate == nil {
		t.Fatalf("outbox: table %q, estimate %v", s.Outbox.Table, s.Outbox.RowEstimate)
	}
	if s.Poison.Pending == nil || *s.Poison.Pending != 0 || s.Poison.Replayed == nil || *s.Poison.Replayed != 0 {
		t.Fatalf("poison: pending %v, replayed %v", s.Poison.Pending, s.Poison.Replayed)
	}

	if s.Kafka.Error != nil {
		t.Fatalf("kafka error: %s", *s.Kafka.Error)
	}
	if s.Kafka.Topic != f.Topic || s.Kafka.Partitions == nil || *s.Kafka.Partitions != f.Partitions || len(s.Kafka.EndOffsets) != f.Partitions {
		t.Fatalf("kafka: topic %q, partitions %v, %d end offsets; want %q, %d", s.Kafka.Topic, s.Kafka.Partitions, len(s.Kafka.EndOffsets), f.Topic, f.Partitions)
	}
	var sum int64
	for _, o := range s.Kafka.EndOffsets {
		if o.EndOffset == nil {
			t.Fatalf("partition %d has no end offset", o.Partition)
		}
		sum += *o.EndOffset
	}
	if sum != int64(want) || s.Kafka.EndOffsetSum == nil || *s.Kafka.EndOffsetSum != int64(want) {
		t.Fatalf("end offsets sum to %d (end_offset_sum %v), want %d delivered", sum, s.Kafka.EndOffsetSum, want)
	}
	if len(s.Notes) != 0 {
		t.Fatalf("healthy status has notes: %q", s.Notes)
	}

	out, err := walpostOutput(t, f.env(), "status")
	if err != nil {
		t.Fatalf("walpost status: %v\n%s", err, out)
	}
	if !strings.Contains(out, f.Slot) || !strings.Contains(out, f.Topic) || !strings.Contains(out, "active:        yes") {
		t.Fatalf("text status lacks the slot, the topic or its activity:\n%s", out)
	}
}

// TestStatusDegraded: no slot yet and Kafka unreachable still print a
// report (exit 0) that says so; PostgreSQL unreachable exits 1.
func TestStatusDegraded(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1})
	env := f.env("WALPOST_KAFKA_BROKERS=127.0.0.1:1")
	s := runStatusJSON(t, env)
	if s.Slot.Exists || s.Slot.Error == nil || !strings.Contains(*s.Slot.Error, "does not exist") ||
		s.Slot.Active != nil || s.Slot.ConfirmedFlushLSN != nil || s.Slot.LagBytes != nil {
		t.Fatalf("missing slot: %+v", s.Slot)
	}
	if s.Kafka.Error == nil || s.Kafka.Partitions != nil || s.Kafka.EndOffsetSum != nil {
		t.Fatalf("unreachable Kafka: %+v", s.Kafka)
	}
	if s.Publication.Name != f.Publication || !s.Publication.Exists || s.Poison.Pending == nil {
		t.Fatalf("the PostgreSQL parts are missing: %+v %+v", s.Publication, s.Poison)
	}
	out, err := walpostOutput(t, env, "status")
	if err != nil || !strings.Contains(out, f.Slot) || !strings.Contains(out, "does not exist") || !strings.Contains(out, "unreachable") {
		t.Fatalf("text status (err %v):\n%s", err, out)
	}

	out, err = walpostOutput(t, f.env("WALPOST_POSTGRES_URL=postgres://walpost:secret@127.0.0.1:1/walpost"), "status")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("PostgreSQL unreachable: err %v, want exit 1\n%s", err, out)
	}
	if strings.Contains(out, "secret") || !strings.Contains(out, "cannot connect to PostgreSQL") {
		t.Fatalf("PostgreSQL unreachable: output leaks the password or lacks the cause:\n%s", out)
	}
}
