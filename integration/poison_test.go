package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/verify"
)

func ptr(s string) *string { return &s }

// TestPoisonOversizedAndReplay: a topic with a small max.message.bytes;
// 1,000 events of which 10 are oversized: 990 delivered in order, the 10
// quarantined with MESSAGE_TOO_LARGE after the configured attempts, no
// other event poisoned, the slot passes them. After raising the limit,
// `walpost poison replay --all` delivers the 10 with their keys in
// created_at order; the rows remain with replayed_at; a second replay
// delivers nothing.
func TestPoisonOversizedAndReplay(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 3, topicConfig: map[string]*string{"max.message.bytes": ptr("4096")}})
	p := f.start("WALPOST_POISON_MAX_ATTEMPTS=3", "WALPOST_POISON_BACKOFF=10ms")
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not stream")
	}
	ctx := context.Background()
	big := `{"blob": "` + strings.Repeat("z", 8000) + `"}`
	small := `{"n": 1}`
	var expected []verify.Expected
	var oversized []string
	for txn := 0; txn < 100; txn++ {
		tx, err := f.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 10; i++ {
			key := fmt.Sprintf("p-%03d-%02d", txn, i)
			payload := small
			if i == 5 && txn%10 == 3 {
				payload = big
				oversized = append(oversized, key)
			} else {
				expected = append(expected, verify.Expected{Key: key, Txn: fmt.Sprint(txn), Index: i})
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES ($1, $2)`, f.Table), key, payload); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	end := f.currentWAL()
	recs := f.consumeAll(t, len(expected), 2*time.Minute)
	rep := verify.Validate(expected, observed(recs))
	t.Logf("validator: %s", rep)
	if !rep.OK() || rep.Delivered != 990 || rep.Unexpected != 0 {
		t.Fatalf("delivery with poison: %s", rep)
	}
	waitFor(t, 30*time.Second, "slot past the poisoned events", func() bool {
		lsn, _, _ := f.slotState()
		return lsn >= end
	})
	type prow struct {
		Key        string `json:"idempotency_key"`
		Attempts   int    `json:"attempts"`
		ErrorClass string `json:"error_class"`
		ReplayedAt *time.Time
	}
	listPoison := func() []prow {
		out, err := walpostOutput(t, f.env(), "poison", "list", "--json")
		if err != nil {
			t.Fatalf("poison list: %v: %s", err, out)
		}
		var rows []struct {
			prow
			ReplayedAt *time.Time `json:"replayed_at"`
		}
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			t.Fatalf("poison list --json: %v: %s", err, out)
		}
		res := make([]prow, len(rows))
		for i, r := range rows {
			res[i] = r.prow
			res[i].ReplayedAt = r.ReplayedAt
		}
		return res
	}
	rows := listPoison()
	if len(rows) != len(oversized) {
		t.Fatalf("poison rows %v, want %d (%v)", rows, len(oversized), oversized)
	}
	for i, r := range rows {
		if r.Key != oversized[i] || r.ErrorClass != "MESSAGE_TOO_LARGE" || r.Attempts != 3 || r.ReplayedAt != nil {
			t.Fatalf("poison row %d = %+v, want key %s, MESSAGE_TOO_LARGE, 3 attempts", i, r, oversized[i])
		}
	}
	// Fix the cause, then replay.
	raiseMaxMessageBytes(t, f, f.Topic)
	out, err := replayPoison(t, f.env(), "--all")
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, out)
	}
	t.Logf("replay:\n%s", out)
	var replayedOrder []string
	for _, line := range strings.Split(out, "\n") {
		if k, ok := strings.CutPrefix(line, "replayed "); ok && !strings.HasPrefix(k, "0") {
			if f := strings.Fields(k); len(f) > 0 && strings.HasPrefix(f[0], "p-") {
				replayedOrder = append(replayedOrder, f[0])
			}
		}
	}
	if strings.Join(replayedOrder, ",") != strings.Join(oversized, ",") {
		t.Fatalf("replayed %v, want %v in created_at order", replayedOrder, oversized)
	}
	all := f.consumeAll(t, 1000, time.Minute)
	got := map[string]map[string]string{}
	for _, r := range all {
		if r.Headers["replayed_from_poison"] == "true" {
			got[r.Key] = r.Headers
		}
	}
	for _, k := range oversized {
		h, ok := got[k]
		if !ok || h["idempotency_key"] != k {
			t.Fatalf("replayed record %s missing or wrong headers %v", k, h)
		}
	}
	for _, r := range listPoison() {
		if r.ReplayedAt == nil {
			t.Fatalf("row %s not marked replayed", r.Key)
		}
	}
	out, err = walpostOutput(t, f.env(), "poison", "replay", "--all")
	if err != nil || !strings.Contains(out, "nothing to replay") {
		t.Fatalf("second replay: %v\n%s", err, out)
	}
	if _, err := f.Pool.Exec(ctx, fmt.Sprintf("DELETE FROM %s", f.PoisonTable)); err == nil || !strings.Contains(err.Error(), "never deleted") {
		t.Fatalf("DELETE on the poison table: %v", err)
	}
}

// TestPoisonTableUnavailable: with INSERT on the poison table revoked, an
// oversized event holds the slot before it; after the grant it is
// quarantined and forwarding goes on.
func TestPoisonTableUnavailable(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1, topicConfig: map[string]*string{"max.message.bytes": ptr("4096")}})
	role := randName("lp")
	mustExec(t, f.Pool, fmt.Sprintf(`CREATE ROLE %s LOGIN REPLICATION PASSWORD 'lp-secret'`, role))
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = f.Pool.Exec(ctx, fmt.Sprintf(`DROP OWNED BY %s`, role))
		_, _ = f.Pool.Exec(ctx, fmt.Sprintf(`DROP ROLE IF EXISTS %s`, role))
	})
	mustExec(t, f.Pool, fmt.Sprintf(`GRANT SELECT ON %s TO %s`, f.Table, role))
	mustExec(t, f.Pool, fmt.Sprintf(`GRANT SELECT, UPDATE ON %s TO %s`, f.PoisonTable, role))
	mustExec(t, f.Pool, fmt.Sprintf(`GRANT SELECT, INSERT, UPDATE ON walpost_position TO %s`, role))
	url := strings.Replace(pgURL, "walpost:walpost@", role+":lp-secret@", 1)
	p := f.start("WALPOST_POSTGRES_URL="+url, "WALPOST_POISON_MAX_ATTEMPTS=2", "WALPOST_POISON_BACKOFF=10ms")
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not stream")
	}
	ctx := context.Background()
	before, err := f.writeTxn(ctx, "a", []string{"u-1"}, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, f.Pool, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES ('u-big', $1)`, f.Table), `{"b": "`+strings.Repeat("q", 6000)+`"}`)
	bigEnd := f.currentWAL() // at or after the end of the oversized event's transaction
	after, err := f.writeTxn(ctx, "c", []string{"u-2"}, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if !p.waitLog("cannot write the poison row", 30*time.Second) {
		t.Fatal("no log line about the failing poison write")
	}
	time.Sleep(2 * time.Second)
	lsnHeld, _, _ := f.slotState()
	if lsnHeld >= bigEnd {
		t.Fatalf("slot confirmed %s, past the oversized event's transaction (ends by %s), while it is not quarantined", lsnHeld, bigEnd)
	}
	mustExec(t, f.Pool, fmt.Sprintf(`GRANT INSERT ON %s TO %s`, f.PoisonTable, role))
	if !p.waitLog("event quarantined", 60*time.Second) {
		t.Fatal("event not quarantined after the grant")
	}
	recs := f.consumeAll(t, 2, time.Minute)
	rep := verify.Validate(append(before, after...), observed(recs))
	if !rep.OK() {
		t.Fatalf("after grant: %s", rep)
	}
	var n int
	if err := f.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE idempotency_key = 'u-big'`, f.PoisonTable)).Scan(&n); err != nil || n != 1 {
		t.Fatalf("poison row count %d, %v", n, err)
	}
}

// TestUnknownTopicHaltsAndResumes: an event routed to a topic that does not
// exist stops forwarding with an error that says what to fix; nothing is
// poisoned and the slot does not pass it; once the topic exists,
// forwarding resumes with nothing lost.
func TestUnknownTopicHaltsAndResumes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1})
	missing := randName("missing")
	t.Cleanup(func() { _, _ = f.Admin.DeleteTopics(context.Background(), missing) })
	p := f.start()
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not stream")
	}
	ctx := context.Background()
	first, err := f.writeTxn(ctx, "a", []string{"m-1"}, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, f.Pool, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload, topic) VALUES ('m-routed', '{}', $1)`, f.Table), missing)
	stuckEnd := f.currentWAL()
	last, err := f.writeTxn(ctx, "c", []string{"m-2"}, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if !p.waitLog("does not exist: create it", 90*time.Second) {
		t.Fatal("no error naming the missing topic")
	}
	held, _, _ := f.slotState()
	if held >= stuckEnd {
		t.Fatalf("slot confirmed %s past the undeliverable event (ends by %s)", held, stuckEnd)
	}
	var n int
	if err := f.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s`, f.PoisonTable)).Scan(&n); err != nil || n != 0 {
		t.Fatalf("poison rows %d (%v), want 0", n, err)
	}
	resp, err := f.Admin.CreateTopic(ctx, 1, -1, nil, missing)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	recs := f.consumeAll(t, 2, 90*time.Second)
	rep := verify.Validate(append(first, last...), observed(recs))
	if !rep.OK() {
		t.Fatalf("after creating the topic: %s", rep)
	}
	waitFor(t, 90*time.Second, "slot past the routed event", func() bool {
		lsn, _, _ := f.slotState()
		return lsn >= stuckEnd
	})
	if err := f.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s`, f.PoisonTable)).Scan(&n); err != nil || n != 0 {
		t.Fatalf("poison rows %d (%v) after the topic was created, want 0", n, err)
	}
	ends, err := f.Admin.ListEndOffsets(ctx, missing)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := ends.Lookup(missing, 0); !ok || o.Offset < 1 {
		t.Fatalf("routed event not in topic %s: %+v", missing, o)
	}
}
