package integration

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNullPayloadTombstone: mapping.tombstone_on_empty_payload in the
// walpost profile. Off (the default) a NULL payload is quarantined
// (NULL_PAYLOAD), and `poison replay` refuses it naming the key instead of
// sending something else; on, the replay sends it as a tombstone (the
// key, a null value, the contract's headers and replayed_from_poison),
// and a NULL payload streamed afterwards is a tombstone with the
// contract's headers, nothing quarantined.
func TestNullPayloadTombstone(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1})
	mustExec(t, f.Pool, fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN payload DROP NOT NULL`, f.Table))
	ctx := context.Background()
	insert := func(key string, payload *string) string {
		t.Helper()
		var id string
		if err := f.Pool.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES ($1, $2) RETURNING id::text`, f.Table), key, payload).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	p := f.start("WALPOST_POISON_MAX_ATTEMPTS=2", "WALPOST_POISON_BACKOFF=10ms")
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatalf("walpost did not stream:\n%s", tail(p.log, 40))
	}
	one := `{"n": 1}`
	insert("t-before", &one)
	nullID := insert("t-null", nil)
	rows := waitPoison(t, f, 1)
	if len(rows) != 1 || rows[0].Key != "t-null" || rows[0].Class != "NULL_PAYLOAD" || rows[0].Payload != nil ||
		!strings.Contains(rows[0].LastError, "mapping.tombstone_on_empty_payload") {
		t.Fatalf("poison rows %+v, want t-null, NULL_PAYLOAD, payload NULL, the error naming mapping.tombstone_on_empty_payload", rows)
	}
	if _, err := p.signal(syscall.SIGTERM, 60*time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}

	// Off: the replay refuses the NULL payload and says which key to set.
	out, err := walpostOutput(t, f.env(), "poison", "replay", "--all")
	if err == nil || !strings.Contains(out, "FAILED t-null") || !strings.Contains(out, "mapping.tombstone_on_empty_payload") {
		t.Fatalf("poison replay with the option off: %v, want it to fail naming t-null and mapping.tombstone_on_empty_payload:\n%s", err, out)
	}
	// On: the replay sends the tombstone.
	out, err = walpostOutput(t, f.env("WALPOST_MAPPING_TOMBSTONE_ON_EMPTY_PAYLOAD=true"), "poison", "replay", "--all")
	if err != nil || !strings.Contains(out, "replayed t-null") {
		t.Fatalf("poison replay with the option on: %v:\n%s", err, out)
	}

	p = f.start("WALPOST_MAPPING_TOMBSTONE_ON_EMPTY_PAYLOAD=true")
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatalf("walpost did not stream:\n%s", tail(p.log, 40))
	}
	streamedID := insert("t-null-2", nil)
	recs := f.consumeAll(t, 3, 60*time.Second)
	byKey := map[string][]record{}
	for _, r := range recs {
		byKey[r.Key] = append(byKey[r.Key], r)
	}
	for _, c := range []struct {
		key, id  string
		replayed bool
	}{{"t-null", nullID, true}, {"t-null-2", streamedID, false}} {
		rs := byKey[c.key]
		if len(rs) != 1 {
			t.Errorf("%s: %d records, want 1 tombstone", c.key, len(rs))
			continue
		}
		r := rs[0]
		if r.Value != nil || r.Headers["idempotency_key"] != c.key || r.Headers["outbox_id"] != c.id ||
			r.Headers["commit_lsn"] == "" || r.Headers["created_at"] == "" || (r.Headers["replayed_from_poison"] == "true") != c.replayed {
			t.Errorf("%s: value %q (nil %v) headers %v; want a tombstone with idempotency_key, outbox_id %s, commit_lsn, created_at (replayed_from_poison %v)",
				c.key, r.Value, r.Value == nil, r.Headers, c.id, c.replayed)
		}
	}
	if len(byKey["t-before"]) != 1 || string(byKey["t-before"][0].Value) != one {
		t.Errorf("t-before: %v, want one record with %s", byKey["t-before"], one)
	}
	if rows := poisonRows(t, f); len(rows) != 1 {
		t.Errorf("poison rows %+v, want only the first t-null", rows)
	}
}

// TestDebeziumReplayNullAggregateType: in the debezium profile a row whose
// aggregatetype (the routing column) is NULL goes to kafka.topic; when
// Kafka refuses it and it is quarantined, the poison row keeps the NULL as
// an empty topic, and `walpost poison replay` sends it to kafka.topic
// again, not to outbox.event.<kafka.topic>. A row with an aggregatetype
// is replayed to its outbox.event.<aggregatetype> topic.
func TestDebeziumReplayNullAggregateType(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1, topicConfig: map[string]*string{"max.message.bytes": ptr("4096")}})
	debeziumTable(t, f)
	mustExec(t, f.Pool, fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN aggregatetype DROP NOT NULL`, f.Table))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	typed := "outbox.event.Order_" + strings.TrimPrefix(f.Topic, "topic_")
	resp, err := f.Admin.CreateTopic(ctx, 1, -1, map[string]*string{"max.message.bytes": ptr("4096")}, typed)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = f.Admin.DeleteTopics(context.Background(), typed) })

	env := []string{"WALPOST_MAPPING_PROFILE=debezium", "WALPOST_POISON_MAX_ATTEMPTS=2", "WALPOST_POISON_BACKOFF=10ms"}
	p := f.start(env...)
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatalf("walpost did not stream:\n%s", tail(p.log, 40))
	}
	big := `{"blob": "` + strings.Repeat("z", 8000) + `"}`
	ids := map[string]string{}
	for _, r := range []struct {
		key string
		typ *string
	}{{"agg-untyped", nil}, {"agg-typed", ptr(strings.TrimPrefix(typed, "outbox.event."))}} {
		var id string
		if err := f.Pool.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %s (aggregatetype, aggregateid, type, payload) VALUES ($1, $2, 'Created', $3) RETURNING id::text`, f.Table),
			r.typ, r.key, big).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[r.key] = id
	}
	rows := waitPoison(t, f, 2)
	var topics []string
	for _, r := range rows {
		if r.Class != "MESSAGE_TOO_LARGE" {
			t.Fatalf("poison rows %+v, want both MESSAGE_TOO_LARGE", rows)
		}
	}
	rs, err := f.Pool.Query(ctx, fmt.Sprintf(`SELECT topic FROM %s ORDER BY commit_lsn`, f.PoisonTable))
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var s string
		if err := rs.Scan(&s); err != nil {
			t.Fatal(err)
		}
		topics = append(topics, s)
	}
	if rs.Err() != nil {
		t.Fatal(rs.Err())
	}
	if want := []string{"", strings.TrimPrefix(typed, "outbox.event.")}; fmt.Sprint(topics) != fmt.Sprint(want) {
		t.Errorf("poison rows' topic column %q, want %q (the NULL aggregatetype kept empty, the other as it is)", topics, want)
	}
	if _, err := p.signal(syscall.SIGTERM, 60*time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	raiseMaxMessageBytes(t, f, f.Topic, typed)
	out, err := replayPoison(t, f.env(env...), "--all")
	if err != nil || !strings.Contains(out, "replayed "+ids["agg-untyped"]+" to kafka.topic") {
		t.Fatalf("poison replay: %v, want agg-untyped's row replayed to kafka.topic:\n%s", err, out)
	}
	t.Logf("replay:\n%s", out)
	for topic, key := range map[string]string{f.Topic: "agg-untyped", typed: "agg-typed"} {
		g := &fixture{t: t, Topic: topic}
		recs := g.consumeAll(t, 1, 60*time.Second)
		if len(recs) != 1 || recs[0].Key != key || recs[0].Headers["id"] != ids[key] || recs[0].Headers["replayed_from_poison"] != "true" {
			t.Errorf("topic %s: %d records %+v, want %s's replayed record alone", topic, len(recs), recs, key)
		}
	}
}
