package integration

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/sink/kafka"
	"github.com/walpost/walpost/verify"
)

// txnsRE reads the Kafka transactions of an exactly-once recover's report.
var txnsRE = regexp.MustCompile(`exactly-once: +produced in (\d+) Kafka transaction`)

// TestRecoverExactlyOnce: an exactly-once walpost confirms events and
// stops; the slot is dropped and writes go on. The slot's checkpoint in
// the checkpoint topic names a position X ahead of where the new slot will
// start, as after a restore of PostgreSQL to an earlier point (review
// correctness-2026-12, finding 1's variant through walpost recover).
//
// walpost recover refuses without --allow-duplicates and changes nothing;
// with it, it produces the gap inside Kafka transactions and commits the
// checkpoint at the new slot's consistent point, the LSN of the position
// row. Events committed after that point and below X are streamed by the
// next walpost run, not skipped up to the older, higher checkpoint: a
// read_committed consumer sees every event, twice only the rows the report
// says it re-sent.
func TestRecoverExactlyOnce(t *testing.T) {
	t.Parallel()
	// A cluster of its own: other tests' WAL could carry the server past
	// X before the events that must land below it are written.
	f := newFixture(t, fixtureOpts{partitions: 3, private: true})
	forgetPosition(t, f.Pool, f.Slot)
	env := f.exactlyOnceEnv("WALPOST_DELIVERY_TRANSACTION_RECORDS=100")
	cpTopic := "cp_" + f.Topic
	ctx := context.Background()
	before := runThenStop(t, f, f, env, "before", 200)
	mustExec(t, f.Pool, `SELECT pg_drop_replication_slot($1)`, f.Slot)
	gap := writeEvents(t, f, "gap", 300)

	// A checkpoint 64 MiB of WAL ahead of the server, committed like
	// walpost's own (the same key, system identifier and timeline).
	var sysID int64
	var timeline int32
	var ahead string
	if err := f.Pool.QueryRow(ctx, `SELECT (SELECT system_identifier FROM pg_control_system()), (SELECT timeline_id FROM pg_control_checkpoint()),
       (pg_current_wal_lsn() + 64 * 1024 * 1024)::text`).Scan(&sysID, &timeline, &ahead); err != nil {
		t.Fatal(err)
	}
	x, err := pglogrepl.ParseLSN(ahead)
	if err != nil {
		t.Fatal(err)
	}
	key := kafka.TransactionalID(f.Slot, sysID)
	value, err := json.Marshal(kafka.TxnMark{Slot: f.Slot, SystemID: sysID, Timeline: timeline, LSN: x})
	if err != nil {
		t.Fatal(err)
	}
	// As walpost run does (INV-10): InitProducerID of the slot's
	// transactional id, which answers only once the markers of its last
	// transaction are written; Kafka writes them after EndTxn returned.
	fence := func(rctx context.Context) {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(key))
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = cl.ProducerID(rctx)
		cl.Close()
		if err != nil {
			t.Fatalf("InitProducerID as %s: %v", key, err)
		}
	}
	// The stopped walpost's last transaction's markers first: a COMMIT
	// marker written after the record ahead would make that transaction's
	// checkpoint the later one.
	fctx, fcancel := context.WithTimeout(ctx, 30*time.Second)
	fence(fctx)
	fcancel()
	if err := f.Kafka.ProduceSync(ctx, &kgo.Record{Topic: cpTopic, Key: []byte(key), Value: value}).FirstErr(); err != nil {
		t.Fatalf("produce the checkpoint ahead: %v", err)
	}
	readCheckpoint := func() kafka.TxnMark {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		fence(rctx)
		cp, found, err := kafka.ReadCheckpoint(rctx, f.Kafka, cpTopic, key)
		if err != nil || !found {
			t.Fatalf("read the checkpoint of %s: found %v, %v", key, found, err)
		}
		return cp
	}
	if cp := readCheckpoint(); cp.LSN != x {
		t.Fatalf("checkpoint before recover at %s, want the one ahead at %s", cp.LSN, x)
	}

	out, code := recoveryCommand(t, append(f.env(), env...), "recover")
	recovered := code == 0
	if code != 1 || !strings.Contains(out, "--allow-duplicates") || !strings.Contains(out, "read_committed") {
		t.Errorf("walpost recover in exactly-once mode without --allow-duplicates: exit %d, want 1 naming the flag and read_committed", code)
	}
	if code != 0 {
		var slots int
		var marked bool
		if err := f.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1),
       (SELECT recovering_since IS NOT NULL FROM walpost_position WHERE slot = $1)`, f.Slot).Scan(&slots, &marked); err != nil {
			t.Fatal(err)
		}
		if slots != 0 || marked {
			t.Errorf("the refused recover changed something: %d slot(s), row marked %v", slots, marked)
		}
		out, code = recoveryCommand(t, append(f.env(), env...), "recover", "--allow-duplicates")
		if code != 0 {
			t.Fatalf("walpost recover --allow-duplicates: exit %d", code)
		}
		recovered = true
	}
	if !recovered {
		t.Fatal("nothing recovered")
	}
	found, produced := queryInt(t, rowsRE, out, 1), queryInt(t, rowsRE, out, 2)
	resent := queryInt(t, resentRE, out, 1)
	if found != produced || produced < len(gap) {
		t.Errorf("report: found %d, produced %d; want equal and at least the gap's %d", found, produced, len(gap))
	}
	if txns := queryInt(t, txnsRE, out, 1); txns != (produced+99)/100 {
		t.Errorf("report: %d Kafka transactions for %d records, want %d (delivery.transaction_records 100)", txns, produced, (produced+99)/100)
	}
	var rowLSN string
	if err := f.Pool.QueryRow(ctx, `SELECT confirmed_lsn::text FROM walpost_position WHERE slot = $1`, f.Slot).Scan(&rowLSN); err != nil {
		t.Fatal(err)
	}
	cp := readCheckpoint()
	t.Logf("position row at %s, checkpoint at %s (the one ahead was %s)", rowLSN, cp.LSN, x)
	if cp.LSN.String() != rowLSN || cp.SystemID != sysID || cp.Timeline != timeline || cp.PartialCommitLSN != 0 {
		t.Errorf("checkpoint after recover: %+v; want LSN %s (the position row), system %d, timeline %d, no partial", cp, rowLSN, sysID, timeline)
	}

	// Transactions after the new slot's consistent point and below X,
	// then WAL past X, so that a run that trusted X would skip them.
	between := writeEvents(t, f, "between", 100)
	for i := 0; ; i++ {
		var past bool
		if err := f.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn() >= $1::pg_lsn`, x.String()).Scan(&past); err != nil {
			t.Fatal(err)
		}
		if past {
			break
		}
		if i == 20 {
			t.Fatalf("WAL did not pass %s", x)
		}
		mustExec(t, f.Pool, `SELECT pg_switch_wal()`)
		mustExec(t, f.Pool, `SELECT pg_logical_emit_message(false, 'walpost-test', 'wal')`)
	}

	p := f.start(env...)
	waitStreaming(t, p)
	after := writeEvents(t, f, "after", 50)
	expected := append(append(append(append([]verify.Expected{}, before...), gap...), between...), after...)
	recs := f.consumeAllWith(t, len(expected), 2*time.Minute, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	rep := verify.Validate(expected, observed(recs))
	t.Logf("read_committed validator: %s; recovered %d, of which re-sent %d", rep, produced, resent)
	if !rep.OK() || rep.Unexpected != 0 || rep.Delivered != len(expected) {
		t.Errorf("delivery after recover: %s", rep)
	}
	if rep.Duplicates() != resent {
		t.Errorf("read_committed sees %d duplicates, the report re-sent %d", rep.Duplicates(), resent)
	}
	n := 0
	for _, r := range recs {
		if r.Headers["walpost_recovered"] == "true" {
			n++
		}
	}
	if n != produced {
		t.Errorf("read_committed sees %d records with walpost_recovered, the report says %d produced", n, produced)
	}
	alive(t, p, "after recover")
}
