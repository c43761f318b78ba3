package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// debeziumTopics creates the outbox.event.<type> topics (3 partitions)
// of two aggregate types unique to f, dropped at cleanup.
func debeziumTopics(ctx context.Context, t testing.TB, f *fixture) (types, topics []string) {
	t.Helper()
	suffix := strings.TrimPrefix(f.Topic, "topic_")
	types = []string{"Order_" + suffix, "Customer_" + suffix}
	for _, ty := range types {
		topics = append(topics, "outbox.event."+ty)
	}
	resp, err := f.Admin.CreateTopics(ctx, 3, -1, nil, topics...)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp {
		if r.Err != nil {
			t.Fatalf("create topic %s: %v", r.Topic, r.Err)
		}
	}
	t.Cleanup(func() { _, _ = f.Admin.DeleteTopics(context.Background(), topics...) })
	return types, topics
}

// debeziumTable replaces the fixture's outbox with Debezium's outbox
// table (its documentation's layout) under the same name and publication.
func debeziumTable(t *testing.T, f *fixture) {
	t.Helper()
	mustExec(t, f.Pool, fmt.Sprintf(`DROP TABLE %s`, f.Table))
	mustExec(t, f.Pool, fmt.Sprintf(`CREATE TABLE %s (
		id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
		aggregatetype varchar(255) NOT NULL,
		aggregateid varchar(255) NOT NULL,
		type varchar(255) NOT NULL,
		payload jsonb)`, f.Table))
	mustExec(t, f.Pool, fmt.Sprintf(`ALTER PUBLICATION %s ADD TABLE %s`, f.Publication, f.Table))
}

// TestDebeziumProfile: a Debezium-layout outbox table forwarded with only
// WALPOST_MAPPING_PROFILE=debezium (plus the fixture's URL, brokers and
// names): each row arrives on outbox.event.<aggregatetype> with key =
// aggregateid, value = the payload as PostgreSQL renders the jsonb, the
// id header alone, on the partition murmur2 of the key gives, in commit
// order per aggregateid. walpost check accepts the table and names
// mapping.key_column when the key column is missing.
func TestDebeziumProfile(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	debeziumTable(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	types, topics := debeziumTopics(ctx, t, f)

	env := f.env("WALPOST_MAPPING_PROFILE=debezium")
	out, err := walpostOutput(t, env, "check")
	if err != nil || !strings.Contains(out, "OK    outbox") {
		t.Fatalf("walpost check with the debezium profile (%v):\n%s", err, out)
	}
	out, _ = walpostOutput(t, f.env("WALPOST_MAPPING_PROFILE=debezium", "WALPOST_MAPPING_KEY_COLUMN=entity_id"), "check")
	if !strings.Contains(out, `no column "entity_id"`) || !strings.Contains(out, "mapping.key_column (WALPOST_MAPPING_KEY_COLUMN)") {
		t.Fatalf("walpost check with a missing key column: want the column and mapping.key_column named:\n%s", out)
	}

	p := f.start("WALPOST_MAPPING_PROFILE=debezium")
	if !p.waitLog("streaming", 30*time.Second) {
		t.Fatalf("walpost did not start streaming:\n%s", tail(p.log, 40))
	}
	// Several transactions, two aggregate types, several aggregates each,
	// unicode, <>& and nested JSON in the payloads.
	const perType = 30
	for i := 0; i < perType; i++ {
		tx, err := f.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for j, ty := range types {
			payload := fmt.Sprintf(`{"seq": %d, "note": "<b>&amp; café ☕</b>", "nested": {"a": [%d, {"b": null}]}}`, i, j)
			if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (aggregatetype, aggregateid, type, payload) VALUES ($1, $2, 'Created', $3)`, f.Table),
				ty, fmt.Sprintf("agg-%d", i%5), payload); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	type row struct{ id, typ, agg, payload string }
	want := map[string]row{}
	rows, err := f.Pool.Query(ctx, fmt.Sprintf(`SELECT id::text, aggregatetype, aggregateid, payload::text FROM %s`, f.Table))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.typ, &r.agg, &r.payload); err != nil {
			t.Fatal(err)
		}
		want[r.id] = r
	}
	if rows.Err() != nil || len(want) != perType*len(types) {
		t.Fatalf("%d rows (%v), want %d", len(want), rows.Err(), perType*len(types))
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	part := kgo.StickyKeyPartitioner(nil).ForTopic("any")
	seen := map[string]bool{}
	lastSeq := map[string]int{} // topic/key → last seq: order per aggregate
	for len(seen) < len(want) && ctx.Err() == nil {
		fctx, fcancel := context.WithTimeout(ctx, time.Second)
		fetches := cl.PollFetches(fctx)
		fcancel()
		fetches.EachRecord(func(r *kgo.Record) {
			if len(r.Headers) != 1 || r.Headers[0].Key != "id" {
				t.Errorf("%s/%d@%d: headers %v, want only id", r.Topic, r.Partition, r.Offset, r.Headers)
				return
			}
			id := string(r.Headers[0].Value)
			w, ok := want[id]
			switch {
			case !ok:
				t.Errorf("record with id %q: no such row", id)
			case seen[id]:
				t.Errorf("id %s delivered twice", id)
			case r.Topic != "outbox.event."+w.typ || string(r.Key) != w.agg || string(r.Value) != w.payload:
				t.Errorf("id %s: topic %s key %q value %s; want outbox.event.%s, key %q, value %s", id, r.Topic, r.Key, r.Value, w.typ, w.agg, w.payload)
			case int(r.Partition) != part.Partition(&kgo.Record{Key: r.Key}, 3):
				t.Errorf("id %s key %q: partition %d, murmur2 gives %d", id, r.Key, r.Partition, part.Partition(&kgo.Record{Key: r.Key}, 3))
			}
			seen[id] = true
			var seq int
			if _, err := fmt.Sscanf(w.payload, `{"seq": %d`, &seq); err != nil {
				t.Errorf("payload %s: %v", w.payload, err)
			}
			k := r.Topic + "/" + string(r.Key)
			if prev, ok := lastSeq[k]; ok && seq <= prev {
				t.Errorf("%s: seq %d after %d: order per aggregateid broken", k, seq, prev)
			}
			lastSeq[k] = seq
		})
	}
	if len(seen) != len(want) {
		t.Fatalf("consumed %d of %d records:\n%s", len(seen), len(want), tail(p.log, 40))
	}
	t.Logf("%d records on %v: topic, key, value, id header, partition and per-aggregate order as Debezium's router under its defaults", len(seen), topics)
}
