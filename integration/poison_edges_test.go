package integration

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver goose needs
	"github.com/pressly/goose/v3"
)

// poisonListRow is the part of `walpost poison list --json` these tests read.
type poisonListRow struct {
	Key        string     `json:"idempotency_key"`
	OutboxID   string     `json:"outbox_id"`
	CommitLSN  string     `json:"commit_lsn"`
	ErrorClass string     `json:"error_class"`
	CreatedAt  time.Time  `json:"created_at"`
	ReplayedAt *time.Time `json:"replayed_at"`
}

func (f *fixture) poisonList(t *testing.T) []poisonListRow {
	t.Helper()
	out, err := walpostOutput(t, f.env(), "poison", "list", "--json")
	if err != nil {
		t.Fatalf("poison list: %v: %s", err, out)
	}
	var rows []poisonListRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("poison list --json: %v: %s", err, out)
	}
	return rows
}

func (f *fixture) poisonCount(t *testing.T) int {
	t.Helper()
	var n int
	if err := f.Pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*) FROM %s`, f.PoisonTable)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func oversized(tag string) string {
	return `{"tag": "` + tag + `", "blob": "` + strings.Repeat("z", 6000) + `"}`
}

// TestPoisonTwoEventsOneKey: two different events with one idempotency key
// (the first outbox row deleted in its own transaction, as the README
// allows, then the key used again), both refused by Kafka: both are
// quarantined as two rows, the slot passes both, and `poison replay --key`
// sends both, in created_at order, each marked replayed on its own row.
func TestPoisonTwoEventsOneKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1, topicConfig: map[string]*string{"max.message.bytes": ptr("4096")}})
	p := f.start("WALPOST_POISON_MAX_ATTEMPTS=1", "WALPOST_POISON_BACKOFF=10ms")
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not stream")
	}
	ctx := context.Background()
	const key = "dup-key"
	mustExec(t, f.Pool, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload, created_at) VALUES ($1, $2, now() - interval '1 second')`, f.Table), key, oversized("first"))
	mustExec(t, f.Pool, fmt.Sprintf(`DELETE FROM %s WHERE idempotency_key = $1`, f.Table), key)
	mustExec(t, f.Pool, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES ($1, $2)`, f.Table), key, oversized("second"))
	after, err := f.writeTxn(ctx, "after", []string{"after-1"}, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	end := f.currentWAL()
	if recs := f.consumeAll(t, len(after), time.Minute); len(recs) != 1 || recs[0].Key != "after-1" {
		t.Fatalf("consumed %v, want only after-1", observed(recs))
	}
	waitFor(t, 30*time.Second, "slot past both events", func() bool {
		lsn, _, _ := f.slotState()
		return lsn >= end
	})
	rows := f.poisonList(t)
	if len(rows) != 2 {
		t.Fatalf("poison rows %+v, want 2 rows of %s: one per quarantined event", rows, key)
	}
	if rows[0].Key != key || rows[1].Key != key || rows[0].OutboxID == rows[1].OutboxID || !rows[0].CreatedAt.Before(rows[1].CreatedAt) {
		t.Fatalf("poison rows %+v, want two rows of %s with distinct outbox ids in created_at order", rows, key)
	}

	raiseMaxMessageBytes(t, f, f.Topic)
	out, err := replayPoison(t, f.env(), "--key", key)
	if err != nil {
		t.Fatalf("replay --key: %v\n%s", err, out)
	}
	t.Logf("replay:\n%s", out)
	if !strings.Contains(out, "replayed 2, failed 0") {
		t.Fatalf("replay output %q, want both rows of %s replayed", out, key)
	}
	var tags []string
	for _, r := range f.consumeAll(t, 2, time.Minute) {
		if r.Key != key || r.Headers["replayed_from_poison"] != "true" {
			continue
		}
		var v struct{ Tag string }
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatalf("replayed value: %v", err)
		}
		tags = append(tags, v.Tag)
	}
	if strings.Join(tags, ",") != "first,second" {
		t.Fatalf("replayed records of %s carry %v, want [first second] (created_at order)", key, tags)
	}
	for _, r := range f.poisonList(t) {
		if r.ReplayedAt == nil {
			t.Errorf("row %s/%s not marked replayed", r.Key, r.OutboxID)
		}
	}
}

// TestPoisonTableColumnTypeFailsCheckAndRun: a poison table whose
// commit_lsn is text fails `walpost check` naming the column and the fix,
// and `walpost run` stops with the same error before streaming.
func TestPoisonTableColumnTypeFailsCheckAndRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1})
	mustExec(t, f.Pool, fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN commit_lsn TYPE text`, f.PoisonTable))
	out, err := walpostOutput(t, f.env(), "check")
	t.Logf("check:\n%s", out)
	if code := exitCode(err); code != 1 {
		t.Fatalf("check exit %d (%v), want 1", code, err)
	}
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "poison_table") {
			line = l
		}
	}
	for _, want := range []string{"FAIL", "column commit_lsn", "has type text", "ALTER TABLE", "TYPE pg_lsn"} {
		if !strings.Contains(line, want) {
			t.Errorf("check line %q lacks %q", line, want)
		}
	}
	p := f.start()
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatal("walpost run did not stop on a poison table it cannot write")
	}
	if code := exitCode(p.err); code != 1 {
		t.Errorf("walpost run exit %d (%v), want 1", code, p.err)
	}
	log := tail(p.log, 40)
	if !strings.Contains(log, "column commit_lsn") || !strings.Contains(log, "TYPE pg_lsn") {
		t.Errorf("walpost run log does not name the column and the fix:\n%s", log)
	}
	if strings.Contains(log, "msg=streaming") {
		t.Errorf("walpost streamed before checking the poison table:\n%s", log)
	}
}

// TestPoisonInsertRefusedStops: an outbox whose id is text holds an event
// Kafka refuses whose id is not a uuid. The poison insert fails with a
// data exception (22P02): walpost stops (exit 1) naming outbox_id and the
// fix instead of retrying forever, with the slot before the event. After
// the fix, a restart quarantines the event and goes on.
func TestPoisonInsertRefusedStops(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1, topicConfig: map[string]*string{"max.message.bytes": ptr("4096")}})
	mustExec(t, f.Pool, fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN id DROP DEFAULT, ALTER COLUMN id TYPE text`, f.Table))
	env := []string{"WALPOST_POISON_MAX_ATTEMPTS=1", "WALPOST_POISON_BACKOFF=10ms"}
	p := f.start(env...)
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not stream")
	}
	mustExec(t, f.Pool, fmt.Sprintf(`INSERT INTO %s (id, idempotency_key, payload) VALUES ('order-7', 'bad-id', $1)`, f.Table), oversized("x"))
	badEnd := f.currentWAL() // at or after the end of the event's transaction
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatal("walpost did not stop on a poison insert PostgreSQL refuses for good (it retries forever)")
	}
	if code := exitCode(p.err); code != 1 {
		t.Errorf("exit %d (%v), want 1", code, p.err)
	}
	log := tail(p.log, 40)
	for _, want := range []string{"column outbox_id", "idempotency_key=bad-id", "ALTER TABLE", "ALTER COLUMN outbox_id TYPE text"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if lsn, _, _ := f.slotState(); lsn >= badEnd {
		t.Fatalf("slot confirmed %s, past the refused event's transaction (ends by %s), which is not quarantined", lsn, badEnd)
	}
	if n := f.poisonCount(t); n != 0 {
		t.Fatalf("%d poison rows, want 0", n)
	}

	mustExec(t, f.Pool, fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN outbox_id TYPE text`, f.PoisonTable))
	end := f.currentWAL()
	p = f.start(env...)
	if !p.waitLog("event quarantined", 60*time.Second) {
		t.Fatal("event not quarantined after the fix")
	}
	waitFor(t, 30*time.Second, "slot past the event", func() bool {
		lsn, _, _ := f.slotState()
		return lsn >= end
	})
	rows := f.poisonList(t)
	if len(rows) != 1 || rows[0].Key != "bad-id" || rows[0].OutboxID != "order-7" {
		t.Fatalf("poison rows %+v, want bad-id with outbox_id order-7", rows)
	}
}

// TestPoisonBreakerCountsEarlierQuarantines: poison.max_rate 3. Two
// quarantines, a clean restart, then two more: the breaker counts the two
// of the first process and trips on the fourth (more than 3 within the
// window). A restart after that trips before writing another row.
func TestPoisonBreakerCountsEarlierQuarantines(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1, topicConfig: map[string]*string{"max.message.bytes": ptr("4096")}})
	env := []string{"WALPOST_POISON_MAX_ATTEMPTS=1", "WALPOST_POISON_BACKOFF=10ms", "WALPOST_POISON_MAX_RATE=3", "WALPOST_POISON_RATE_WINDOW=1h"}
	insertBig := func(keys ...string) {
		for _, k := range keys {
			mustExec(t, f.Pool, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES ($1, $2)`, f.Table), k, oversized(k))
		}
	}
	p := f.start(env...)
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not stream")
	}
	insertBig("b-1", "b-2")
	waitFor(t, 60*time.Second, "two quarantines", func() bool { return f.poisonCount(t) == 2 })
	if _, err := p.signal(syscall.SIGTERM, 60*time.Second); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}

	p = f.start(env...)
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not stream after the restart")
	}
	if !strings.Contains(tail(p.log, 40), "poisoned=2") {
		t.Errorf("restart log does not count the 2 earlier quarantines:\n%s", tail(p.log, 40))
	}
	insertBig("b-3", "b-4")
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("breaker did not trip after 4 quarantines within the window across a restart (poison rows: %d)", f.poisonCount(t))
	}
	if code := exitCode(p.err); code != 1 || !strings.Contains(tail(p.log, 20), "poison breaker tripped") {
		t.Fatalf("exit %d (%v), want 1 with the breaker:\n%s", code, p.err, tail(p.log, 20))
	}
	if n := f.poisonCount(t); n != 4 {
		t.Fatalf("%d poison rows, want 4", n)
	}

	p = f.start(env...)
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not stream after the second restart")
	}
	insertBig("b-5")
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatal("breaker did not trip at once after a restart with the window already full")
	}
	if n := f.poisonCount(t); n != 4 {
		t.Fatalf("%d poison rows after a restart with the breaker tripped, want still 4 (nothing more quarantined)", n)
	}
}

// TestMigrateUpgradesPoisonIdentity: a database at schema version 1 (the
// poison table keyed by idempotency_key) with rows in it, one without an
// outbox id: `walpost migrate` applies 00002, keeps every row, keys the
// table by (outbox_id, commit_lsn), and a second event with a taken key
// can then be stored.
func TestMigrateUpgradesPoisonIdentity(t *testing.T) {
	t.Parallel()
	needStack(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	db := randName("mig")
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)") })
	cfg, err := pgx.ParseConfig(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	url := strings.Replace(pgURL, "/"+cfg.Database+"?", "/"+db+"?", 1)

	// Version 1, as an older walpost migrate left it.
	v1, err := os.ReadFile(filepath.Join(repoRoot, "migrations", "00001_outbox.sql"))
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer sqlDB.Close()
	prov, err := goose.NewProvider(goose.DialectPostgres, sqlDB, fstest.MapFS{"00001_outbox.sql": {Data: v1}}, goose.WithTableName("walpost_schema_version"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prov.Up(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO poison_outbox (idempotency_key, outbox_id, payload, created_at, topic, attempts, last_error, error_class, commit_lsn) VALUES
		('k-1', '5f0c6c8e-2d3b-4c1a-9a57-0d5e1c8b7a11', '{"n": 1}', now(), 't', 5, 'e', 'MESSAGE_TOO_LARGE', '0/16B3748'),
		('k-2', NULL, '{"n": 2}', now(), 't', 5, 'e', 'MESSAGE_TOO_LARGE', '0/16B3800')`); err != nil {
		t.Fatal(err)
	}

	out, err := walpostOutput(t, []string{"WALPOST_POSTGRES_URL=" + url}, "migrate")
	// 00002 upgrades the poison table; later migrations (walpost's own
	// tables) are applied in the same run.
	if err != nil || !strings.Contains(out, "applied [2") {
		t.Fatalf("walpost migrate on version 1: %v\n%s", err, out)
	}
	var n int
	var nullIDs int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE outbox_id IS NULL) FROM poison_outbox`).Scan(&n, &nullIDs); err != nil || n != 2 || nullIDs != 0 {
		t.Fatalf("after migrate: %d rows, %d without outbox_id (%v); want both rows kept, each with an id", n, nullIDs, err)
	}
	var pk string
	if err := conn.QueryRow(ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'poison_outbox'::regclass AND contype = 'p'`).Scan(&pk); err != nil || pk != "PRIMARY KEY (outbox_id, commit_lsn)" {
		t.Fatalf("primary key %q (%v), want PRIMARY KEY (outbox_id, commit_lsn)", pk, err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO poison_outbox (idempotency_key, outbox_id, payload, created_at, topic, attempts, last_error, error_class, commit_lsn)
		VALUES ('k-1', '6a1d7d9f-3e4c-4d2b-8b68-1e6f2d9c8b22', '{"n": 3}', now(), 't', 5, 'e', 'MESSAGE_TOO_LARGE', '0/16B3900')`); err != nil {
		t.Fatalf("a second event of k-1 after the upgrade: %v", err)
	}
	out, err = walpostOutput(t, []string{"WALPOST_POSTGRES_URL=" + url}, "migrate")
	if err != nil || !strings.Contains(out, "schema up to date (version ") {
		t.Fatalf("second walpost migrate: %v\n%s", err, out)
	}
}
