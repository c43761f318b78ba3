package integration

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestByteaPayload: an outbox whose payload column is bytea is produced as
// the raw bytes (as Debezium's binary converter writes them), even when
// the role's bytea_output is escape (postgres.url's options=-c
// bytea_output=escape: walpost's connections ask for hex); walpost check
// says the value is the raw bytes. The size check counts the bytes, not
// their text, a record too large for the topic lands in a bytea poison
// table byte for byte, and walpost poison replay sends those bytes. Mutation: without byteaHex in the
// replication connection's parameters the escape text arrives and every
// record is quarantined (BINARY_TEXT).
func TestByteaPayload(t *testing.T) {
	t.Parallel()
	maxBytes := "4096"
	f := newFixture(t, fixtureOpts{partitions: 1, topicConfig: map[string]*string{"max.message.bytes": &maxBytes}})
	mustExec(t, f.Pool, fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN payload TYPE bytea USING convert_to(payload::text, 'UTF8')`, f.Table))
	mustExec(t, f.Pool, fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN payload TYPE bytea USING convert_to(payload::text, 'UTF8')`, f.PoisonTable))
	url := f.PGURL + "&options=-c%20bytea_output%3Descape"
	if !strings.Contains(f.PGURL, "?") {
		url = f.PGURL + "?options=-c%20bytea_output%3Descape"
	}
	env := f.env("WALPOST_POSTGRES_URL=" + url)

	out, err := walpostOutput(t, env, "check")
	if !strings.Contains(out, "value payload: its raw bytes (bytea, not its \\x text)") {
		t.Errorf("walpost check does not say the payload is sent as its raw bytes (%v):\n%s", err, out)
	}

	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	payloads := map[string][]byte{"all-bytes": all, "empty": {}, "nul": {0}, "text": []byte(`{"a": 1}`), "backslash": []byte(`\x41`)}
	// 3,000 bytes: 6,002 of hex text, but the record is the bytes and fits
	// the topic's 4,096.
	fits := bytes.Repeat(all, 12)[:3000]
	payloads["fits"] = fits
	tooLarge := bytes.Repeat(all, 20) // 5,120 bytes: refused, quarantined
	p := f.start("WALPOST_POSTGRES_URL="+url, "WALPOST_POISON_MAX_ATTEMPTS=1")
	waitStreaming(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := &pgx.Batch{}
	for k, v := range payloads {
		b.Queue(fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES ($1, $2)`, f.Table), k, v)
	}
	b.Queue(fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES ($1, $2)`, f.Table), "too-large", tooLarge)
	if err := f.Pool.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	recs := f.consumeAll(t, len(payloads), 30*time.Second)
	got := map[string][]byte{}
	for _, r := range recs {
		got[r.Key] = r.Value
	}
	for k, v := range payloads {
		if !bytes.Equal(got[k], v) {
			t.Errorf("key %s: value of %d bytes %q…, want the %d bytes %q…", k, len(got[k]), got[k][:min(len(got[k]), 16)], len(v), v[:min(len(v), 16)])
		}
	}
	var poisoned []byte
	waitFor(t, 30*time.Second, "the too-large record in the poison table", func() bool {
		err := f.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT payload FROM %s WHERE idempotency_key = 'too-large'`, f.PoisonTable)).Scan(&poisoned)
		return err == nil
	})
	if !bytes.Equal(poisoned, tooLarge) {
		t.Errorf("poison table payload: %d bytes, want the %d bytes of the outbox row", len(poisoned), len(tooLarge))
	}
	var n int
	if err := f.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s`, f.PoisonTable)).Scan(&n); err != nil || n != 1 {
		t.Errorf("poison table: %d rows (%v), want the too-large one only", n, err)
	}

	// Raised limit: walpost poison replay sends the quarantined bytes.
	raiseMaxMessageBytes(t, f, f.Topic)
	if out, err := replayPoison(t, f.env("WALPOST_POSTGRES_URL="+url), "--key", "too-large"); err != nil || !strings.Contains(out, "replayed 1, failed 0") {
		t.Fatalf("walpost poison replay: %v\n%s", err, out)
	}
	var replayed []byte
	f.read(t, 30*time.Second, 0, func(r *kgo.Record) {
		if string(r.Key) == "too-large" {
			replayed = r.Value
		}
	}, func() bool { return replayed != nil })
	if !bytes.Equal(replayed, tooLarge) {
		t.Errorf("replayed record: %d bytes, want the %d bytes of the outbox row", len(replayed), len(tooLarge))
	}
}

// TestByteaRefused: a bytea column walpost would send as text (here the
// key column) is refused by walpost check and by walpost run at start,
// naming the column and its key; a bytea payload with a jsonb poison
// table (which could not hold a quarantined payload) is refused naming
// the poison table's payload column. Mutation: MappingTypes without the
// text-column loop: check reports OK and run streams.
func TestByteaRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1})
	mustExec(t, f.Pool, fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN payload TYPE bytea USING convert_to(payload::text, 'UTF8')`, f.Table))
	out, err := walpostOutput(t, f.env(), "check")
	if err == nil || !strings.Contains(out, "FAIL  poison_table") || !strings.Contains(out, "column payload") || !strings.Contains(out, "TYPE bytea") {
		t.Errorf("walpost check with a jsonb poison payload (%v):\n%s", err, out)
	}
	out, code := runToExit(t, f.env())
	assertStopped(t, out, code, "column payload", "cannot hold the outbox's bytea payload")

	mustExec(t, f.Pool, fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN payload TYPE bytea USING convert_to(payload::text, 'UTF8')`, f.PoisonTable))
	mustExec(t, f.Pool, fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN idempotency_key TYPE bytea USING convert_to(idempotency_key, 'UTF8')`, f.Table))
	out, err = walpostOutput(t, f.env(), "check")
	if err == nil || !strings.Contains(out, "FAIL  outbox") || !strings.Contains(out, `column "idempotency_key" (mapping.key_column) is bytea`) {
		t.Errorf("walpost check with a bytea key column (%v):\n%s", err, out)
	}
	out, code = runToExit(t, f.env())
	assertStopped(t, out, code, `column "idempotency_key" (mapping.key_column) is bytea`)
}
