package inbox

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

const topic = "accounts"

// rec is a record of walpost's contract on partition p at offset off.
// flags: "replayed", "recovered", "nolsn" (a record without commit_lsn),
// "debezium" (no idempotency_key: the key is in the id header).
func rec(p int32, off int64, key, lsn string, flags ...string) *kgo.Record {
	r := &kgo.Record{Topic: topic, Partition: p, Offset: off, Key: []byte(key)}
	has := func(f string) bool { return slices.Contains(flags, f) }
	if has("debezium") {
		r.Key = []byte("aggregate-1") // Debezium's key is the aggregate, shared
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderID, Value: []byte(key)})
	} else {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderIdempotencyKey, Value: []byte(key)})
	}
	if !has("nolsn") {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderCommitLSN, Value: []byte(lsn)})
	}
	if has("replayed") {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderReplayed, Value: []byte("true")})
	}
	if has("resent") {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderResent, Value: []byte("true")})
	}
	if has("recovered") {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderRecovered, Value: []byte("true")})
	}
	return r
}

// consumer is one consumer group's inbox on a fake database.
type consumer struct {
	t  *testing.T
	db *fakeDB
	in *Inbox
}

func newConsumer(t *testing.T, cfg Config) *consumer {
	if cfg.Group == "" {
		cfg.Group = "billing"
	}
	in, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &consumer{t: t, db: newFakeDB(), in: in}
}

// batch applies recs in one committed transaction and returns the keys
// whose effect ran.
func (c *consumer) batch(recs ...*kgo.Record) []string {
	c.t.Helper()
	tx := c.db.begin()
	var keys []string
	_, err := c.in.run(context.Background(), tx, recs, func(fresh []*kgo.Record) error {
		for _, r := range fresh {
			ev, _ := parse(r)
			keys = append(keys, ev.keyString())
			tx.st.effects[ev.keyString()]++
		}
		return nil
	})
	if err != nil {
		c.t.Fatal(err)
	}
	tx.commit()
	return keys
}

// each applies recs one transaction per record (Apply).
func (c *consumer) each(recs ...*kgo.Record) []string {
	c.t.Helper()
	var keys []string
	for _, r := range recs {
		keys = append(keys, c.batch(r)...)
	}
	return keys
}

func (c *consumer) want(got []string, want ...string) {
	c.t.Helper()
	if strings.Join(got, " ") != strings.Join(want, " ") {
		c.t.Fatalf("applied [%s], want [%s]", strings.Join(got, " "), strings.Join(want, " "))
	}
}

// once checks that every key's effect committed exactly once.
func (c *consumer) once(keys ...string) {
	c.t.Helper()
	for _, k := range keys {
		if n := c.db.st.effects[k]; n != 1 {
			c.t.Errorf("effect of %s committed %d times, want 1", k, n)
		}
	}
}

func (c *consumer) keyRows() int { return len(c.db.st.keys) }

// A restart of walpost re-sends whole transactions from the first one it
// had not confirmed: a partly sent transaction comes again whole, and its
// records already applied are recognised by the watermark's keys; earlier
// ones by its LSN. No key row is written.
func TestResentSuffix(t *testing.T) {
	for _, mode := range []string{"batch", "each"} {
		t.Run(mode, func(t *testing.T) {
			c := newConsumer(t, Config{})
			apply := c.batch
			if mode == "each" {
				apply = c.each
			}
			c.want(apply(rec(0, 0, "a", "0/100"), rec(0, 1, "b", "0/100"), rec(0, 2, "c", "0/200"), rec(0, 3, "d", "0/200")),
				"a", "b", "c", "d")
			// walpost killed while L 0/200's third record was unsent; the
			// slot had confirmed only up to 0/100's predecessor.
			c.want(apply(rec(0, 4, "a", "0/100"), rec(0, 5, "b", "0/100"), rec(0, 6, "c", "0/200"), rec(0, 7, "d", "0/200"),
				rec(0, 8, "e", "0/200"), rec(0, 9, "f", "0/300")), "e", "f")
			c.once("a", "b", "c", "d", "e", "f")
			if c.keyRows() != 0 {
				t.Fatalf("%d key rows, want 0: a re-sent suffix is decided by the watermark", c.keyRows())
			}
		})
	}
}

// A poison replay carries its original, older LSN: the key table decides,
// once; a second replay of it is a duplicate.
func TestReplayOldLSN(t *testing.T) {
	c := newConsumer(t, Config{})
	// b was quarantined: its transaction arrives without it.
	c.want(c.batch(rec(0, 0, "a", "0/100"), rec(0, 1, "c", "0/100"), rec(0, 2, "d", "0/200")), "a", "c", "d")
	c.want(c.batch(rec(0, 3, "b", "0/100", "replayed")), "b")
	c.want(c.batch(rec(0, 4, "b", "0/100", "replayed")))
	// A replayed record of the watermark's own transaction.
	c.want(c.batch(rec(0, 5, "g", "0/300"), rec(0, 6, "h", "0/300", "replayed"), rec(0, 7, "h", "0/300", "replayed")), "g", "h")
	// A replayed copy of a record the watermark applied is recognised
	// without a key row.
	c.want(c.batch(rec(0, 8, "g", "0/300", "replayed")))
	c.once("a", "b", "c", "d", "g", "h")
	if c.keyRows() != 2 {
		t.Fatalf("%d key rows, want 2 (b and h)", c.keyRows())
	}
}

// walpost recover sends a lost slot's gap with the new slot's consistent
// point as commit LSN and walpost_recovered: the key table decides; a
// second recover is a duplicate, and the stream after it goes on.
func TestRecoveredRecord(t *testing.T) {
	c := newConsumer(t, Config{})
	c.want(c.batch(rec(0, 0, "a", "0/100")), "a")
	c.want(c.batch(rec(0, 1, "b", "0/500", "recovered"), rec(0, 2, "c", "0/500", "recovered")), "b", "c")
	c.want(c.batch(rec(0, 3, "b", "0/600", "recovered"), rec(0, 4, "d", "0/700")), "d")
	c.want(c.batch(rec(0, 5, "a", "0/100")))
	// walpost resend's records are decided the same way.
	c.want(c.batch(rec(0, 6, "r", "0/800", "resent"), rec(0, 7, "r", "0/800", "resent")), "r")
	c.once("a", "b", "c", "d", "r")
}

// recover's margin re-sends rows that were delivered before the slot was
// lost. Without KeyEveryEvent the watermark kept no key of them, so they
// are applied again (doc.go, "What breaks it"); with it, once.
func TestRecoveredMargin(t *testing.T) {
	first := []*kgo.Record{rec(0, 0, "a", "0/100"), rec(0, 1, "b", "0/200")}
	again := []*kgo.Record{rec(0, 2, "b", "0/500", "recovered"), rec(0, 3, "c", "0/500", "recovered")}
	t.Run("watermark only", func(t *testing.T) {
		c := newConsumer(t, Config{})
		c.batch(first...)
		c.want(c.batch(again...), "b", "c")
		if c.db.st.effects["b"] != 2 {
			t.Fatal("b applied once: update doc.go, the limit is gone")
		}
	})
	t.Run("KeyEveryEvent", func(t *testing.T) {
		c := newConsumer(t, Config{KeyEveryEvent: true})
		c.batch(first...)
		c.want(c.batch(again...), "c")
		// The other order: a key row of a recovered record stops a late
		// first send in the same batch.
		c.want(c.batch(rec(0, 4, "x", "0/900", "recovered"), rec(0, 5, "x", "0/901"), rec(0, 6, "y", "0/901")), "x", "y")
		c.once("a", "b", "c", "x", "y")
	})
}

// LSNs are not contiguous and offsets have gaps (transaction markers,
// aborted records): neither matters.
func TestGap(t *testing.T) {
	c := newConsumer(t, Config{})
	c.want(c.batch(rec(0, 0, "a", "0/100"), rec(0, 7, "b", "5/0")), "a", "b")
	c.want(c.batch(rec(0, 20, "c", "5/1"), rec(0, 21, "d", "FFFFFFFF/FFFFFFF0")), "c", "d")
	m := c.db.st.marks["billing/accounts/0"]
	if m.lsn != "FFFFFFFF/FFFFFFF0" || m.next != 22 || m.keys != `["d"]` {
		t.Fatalf("watermark %+v", m)
	}
}

// After a rebalance the new owner starts from the last Kafka commit,
// behind the database, while the old owner, not yet told, applies one more
// batch: the watermark row serialises both and nothing is applied twice;
// the stored offset never goes back.
func TestRebalance(t *testing.T) {
	c := newConsumer(t, Config{})
	log := []*kgo.Record{rec(0, 0, "a", "0/100"), rec(0, 1, "b", "0/100"), rec(0, 2, "c", "0/200"),
		rec(0, 3, "d", "0/300"), rec(0, 4, "e", "0/300"), rec(0, 5, "f", "0/400")}
	var got []string
	got = append(got, c.batch(log[:3]...)...)  // old owner, Kafka commit lost
	got = append(got, c.batch(log[0:5]...)...) // new owner from offset 0
	got = append(got, c.batch(log[3:6]...)...) // old owner's last batch
	c.want(got, "a", "b", "c", "d", "e", "f")
	c.batch(log[0:2]...) // a zombie's stale batch
	if m := c.db.st.marks["billing/accounts/0"]; m.next != 6 {
		t.Fatalf("next offset %d, want 6", m.next)
	}
	c.once("a", "b", "c", "d", "e", "f")
}

// A failover with synchronized_standby_slots: walpost never published a
// transaction the standby lacked, so every LSN of the new timeline is above
// every LSN delivered; the promoted standby's slot copy is behind, so
// walpost re-sends old-timeline transactions, which the watermark skips.
// The old primary's unpublished transaction at 0/400 is gone; the new
// timeline reuses LSNs above the switch point 0/350.
func TestFailover(t *testing.T) {
	c := newConsumer(t, Config{})
	c.want(c.batch(rec(0, 0, "a", "0/100"), rec(0, 1, "b", "0/200"), rec(0, 2, "c", "0/300")), "a", "b", "c")
	c.want(c.batch(rec(0, 3, "b", "0/200"), rec(0, 4, "c", "0/300"), rec(0, 5, "n1", "0/360"), rec(0, 6, "n2", "0/380"),
		rec(0, 7, "n3", "0/420")), "n1", "n2", "n3")
	c.once("a", "b", "c", "n1", "n2", "n3")
}

// Without synchronized_standby_slots walpost may publish a transaction
// (0/400) the standby never received; after the failover the new
// timeline's transaction at 0/380 is below the watermark and is skipped.
// The guarantee rests on the setting (doc.go, "Failover"); this test pins
// what happens without it.
func TestFailoverWithoutStandbySlots(t *testing.T) {
	c := newConsumer(t, Config{})
	c.batch(rec(0, 0, "a", "0/300"), rec(0, 1, "phantom", "0/400"))
	if got := c.batch(rec(0, 2, "n1", "0/380"), rec(0, 3, "n2", "0/420")); slices.Contains(got, "n1") {
		t.Fatal("n1 applied: update doc.go, a failover without synchronized_standby_slots no longer loses effects")
	}
}

// Debezium-profile records have no walpost headers: the id header is the
// key, the key table decides. A record with commit_lsn but no
// idempotency_key falls back to the record key.
func TestHeaderless(t *testing.T) {
	c := newConsumer(t, Config{})
	c.want(c.batch(rec(0, 0, "id-1", "", "nolsn", "debezium"), rec(0, 1, "id-2", "", "nolsn", "debezium"),
		rec(0, 2, "id-1", "", "nolsn", "debezium")), "id-1", "id-2")
	plain := &kgo.Record{Topic: topic, Key: []byte("k1")}
	c.want(c.batch(plain, plain), "k1")
	if c.keyRows() != 3 {
		t.Fatalf("%d key rows, want 3", c.keyRows())
	}
}

// Records of several partitions in one batch, and the same key twice in
// one batch.
func TestBatchAcrossPartitions(t *testing.T) {
	c := newConsumer(t, Config{})
	c.want(c.batch(rec(1, 0, "a", "0/100"), rec(0, 0, "b", "0/100"), rec(1, 1, "c", "0/200"), rec(1, 0, "a", "0/100"),
		rec(0, 1, "d", "0/150")), "a", "b", "c", "d")
	if len(c.db.st.marks) != 2 {
		t.Fatalf("%d watermarks, want 2", len(c.db.st.marks))
	}
}

// A failed effect rolls the transaction back: the record is new again.
func TestEffectFails(t *testing.T) {
	c := newConsumer(t, Config{})
	tx := c.db.begin()
	boom := errors.New("boom")
	_, err := c.in.run(context.Background(), tx, []*kgo.Record{rec(0, 0, "a", "0/100")}, func([]*kgo.Record) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	c.want(c.batch(rec(0, 0, "a", "0/100")), "a")
}

// A record the inbox cannot place is refused before any statement.
func TestInvalidRecord(t *testing.T) {
	c := newConsumer(t, Config{})
	for _, r := range []*kgo.Record{
		rec(0, 0, "a", "0/1/2"),
		rec(0, 0, "a", "zz/1"),
		{Topic: topic},
		{Key: []byte("a")},
	} {
		tx := c.db.begin()
		_, err := c.in.run(context.Background(), tx, []*kgo.Record{rec(0, 0, "ok", "0/1"), r}, func([]*kgo.Record) error { return nil })
		if !errors.Is(err, ErrInvalidRecord) {
			t.Errorf("%v: err = %v, want ErrInvalidRecord", r.Headers, err)
		}
		if len(tx.st.marks) != 0 {
			t.Errorf("%v: a watermark was written", r.Headers)
		}
	}
}

func TestParseLSN(t *testing.T) {
	for s, want := range map[string]LSN{"0/0": 0, "0/16B3748": 0x16B3748, "16/B374D848": 0x16B374D848, "FFFFFFFF/FFFFFFFF": 1<<64 - 1} {
		got, err := ParseLSN(s)
		if err != nil || got != want || got.String() != s {
			t.Errorf("ParseLSN(%q) = %v (%s), %v; want %v", s, uint64(got), got, err, uint64(want))
		}
	}
	for _, s := range []string{"", "0", "/1", "1/", "g/1", "1/100000000", "-1/1", "1/2/3"} {
		if _, err := ParseLSN(s); err == nil {
			t.Errorf("ParseLSN(%q) accepted", s)
		}
	}
}

func TestNew(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("no group accepted")
	}
	if _, err := New(Config{Group: "g", KeepFor: -1}); err == nil {
		t.Error("a negative KeepFor accepted")
	}
}

// A first send of an earlier transaction appended after a later one (the
// case walpost logs as "record appended ahead of an earlier refused record
// of its partition" when the refused record is then re-sent, not
// quarantined) is below the watermark and skipped: the guarantee rests on
// commit order per partition (doc.go, "What breaks it"). This test pins
// it.
func TestFirstSendBehindWatermark(t *testing.T) {
	c := newConsumer(t, Config{})
	c.want(c.batch(rec(0, 0, "a", "0/100"), rec(0, 1, "c", "0/200")), "a", "c")
	if got := c.batch(rec(0, 2, "b", "0/100")); len(got) != 0 {
		t.Fatal("b applied: update doc.go, a late first send is no longer skipped")
	}
}
