package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/verify"
)

// The bad-input catalogue: one test per kind of bad input (environment,
// configuration or row), each pinning walpost's exact behaviour, and for
// rows that nothing is lost: a poisoned event is in the poison table with
// its error_class, a delivered one is byte-exact in the topic.
//
// Related rows covered elsewhere: slot in use by another process
// (TestHotStandby), payload larger than max.message.bytes
// (TestPoisonOversizedAndReplay), unknown row topic
// (TestUnknownTopicHaltsAndResumes), and TestRunError* in errors_test.go.
//
// The tests create their fixture first (walpost migrate is not run
// concurrently), then run in parallel.

// poisonTableEnv keeps quarantine fast.
var poisonTableEnv = []string{"WALPOST_POISON_MAX_ATTEMPTS=2", "WALPOST_POISON_BACKOFF=10ms"}

const wrongPassword = "secretPw9"

// runToStop runs `walpost run` with env until it exits or timeout passes and
// returns its output, exit code and run time.
func runToStop(t *testing.T, env []string, timeout time.Duration) (string, int, time.Duration) {
	t.Helper()
	needStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "run")
	cmd.SysProcAttr = childAttr()
	cmd.Env = append(baseEnv(), env...)
	cmd.WaitDelay = 5 * time.Second
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	out := buf.String()
	t.Logf("walpost run exited after %s (%v); output:\n%s", took.Round(time.Millisecond), err, out)
	if ctx.Err() != nil {
		t.Fatalf("walpost run did not exit within %s", timeout)
	}
	if err == nil {
		return out, 0, took
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("walpost run: %v", err)
	}
	return out, ee.ExitCode(), took
}

// noSlot asserts walpost did not create the fixture's slot.
func noSlot(t *testing.T, f *fixture) {
	t.Helper()
	if _, _, ok := f.slotState(); ok {
		t.Errorf("slot %s was created although walpost refused to start", f.Slot)
	}
}

// startCatalogue starts `walpost run` on the fixture with fast quarantine and
// waits until it streams.
func startCatalogue(t *testing.T, f *fixture, extra ...string) *proc {
	t.Helper()
	p := f.start(append(append([]string{}, poisonTableEnv...), extra...)...)
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatal("walpost did not stream")
	}
	return p
}

// outboxRow is one outbox row to insert. A nil field is NULL (payload and
// headers) or left to the column default.
type outboxRow struct {
	key       string
	payload   *string // SQL expression for the payload; nil: payloadTx
	payloadTx string  // jsonb text, bound as a parameter
	eventType *string
	headers   *string // jsonb text
}

// insertTxn inserts rows in one transaction; payload may be a SQL
// expression (payload != nil).
func insertTxn(t *testing.T, f *fixture, rows []outboxRow) {
	t.Helper()
	ctx := context.Background()
	tx, err := f.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, r := range rows {
		var err error
		if r.payload != nil {
			_, err = tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload, event_type, headers) VALUES ($1, %s, $2, $3::jsonb)`, f.Table, *r.payload),
				r.key, r.eventType, r.headers)
		} else {
			_, err = tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload, event_type, headers) VALUES ($1, $2::jsonb, $3, $4::jsonb)`, f.Table),
				r.key, r.payloadTx, r.eventType, r.headers)
		}
		if err != nil {
			t.Fatalf("insert %.40q: %v", r.key, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// fullRecord is a consumed record with its headers in order (duplicates
// kept).
type fullRecord struct {
	verify.Observed
	Key     []byte
	Value   []byte
	Headers []kgo.RecordHeader
	IsNull  bool // Value == nil (a tombstone)
}

func (r fullRecord) header(name string) []string {
	var out []string
	for _, h := range r.Headers {
		if h.Key == name {
			out = append(out, string(h.Value))
		}
	}
	return out
}

// consumeRecords reads the fixture's topic from the start until want records
// arrived and the topic stayed quiet for 1.5 s, or timeout passes.
func consumeRecords(t *testing.T, f *fixture, want int, timeout time.Duration) []fullRecord {
	t.Helper()
	var out []fullRecord
	f.read(t, timeout, 1500*time.Millisecond, func(r *kgo.Record) {
		out = append(out, fullRecord{Observed: observe(r), Key: r.Key, Value: r.Value, Headers: r.Headers, IsNull: r.Value == nil})
	}, func() bool { return len(out) >= want })
	return out
}

// poisonRow is a row of the fixture's poison table.
type poisonRow struct {
	Key, Class, LastError string
	Attempts              int
	Payload, Headers      *string
}

func poisonRows(t *testing.T, f *fixture) []poisonRow {
	t.Helper()
	rows, err := f.Pool.Query(context.Background(), fmt.Sprintf(
		`SELECT idempotency_key, error_class, last_error, attempts, payload::text, headers::text FROM %s ORDER BY commit_lsn, poisoned_at`, f.PoisonTable))
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (poisonRow, error) {
		var p poisonRow
		err := r.Scan(&p.Key, &p.Class, &p.LastError, &p.Attempts, &p.Payload, &p.Headers)
		return p, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitPoison waits until the poison table has n rows.
func waitPoison(t *testing.T, f *fixture, n int) []poisonRow {
	t.Helper()
	var got []poisonRow
	waitFor(t, 60*time.Second, fmt.Sprintf("%d poison rows", n), func() bool {
		got = poisonRows(t, f)
		return len(got) >= n
	})
	return got
}

// expectDelivered checks that the delivered records are exactly the
// rows with keys want (one record each, nothing else, commit and insert
// order per partition) and that each is byte-exact: key, value = payload
// as PostgreSQL renders it, and the contract's headers.
func expectDelivered(t *testing.T, f *fixture, recs []fullRecord, want []verify.Expected) {
	t.Helper()
	obs := make([]verify.Observed, len(recs))
	for i, r := range recs {
		obs[i] = r.Observed
	}
	rep := verify.Validate(want, obs)
	if !rep.OK() || rep.Unexpected != 0 || rep.Duplicates() != 0 || len(recs) != len(want) {
		t.Errorf("delivery: %s (%d records for %d expected)", rep, len(recs), len(want))
	}
	byKey := map[string]fullRecord{}
	for _, r := range recs {
		if r.IsNull {
			t.Errorf("record %.40q is a tombstone (NULL value)", r.Key)
		}
		byKey[string(r.Key)] = r
	}
	for _, e := range want {
		r, ok := byKey[e.Key]
		if !ok {
			continue // reported by Validate
		}
		checkRecord(t, f, e.Key, r)
	}
}

// checkRecord compares one record with its outbox row.
func checkRecord(t *testing.T, f *fixture, key string, r fullRecord) {
	t.Helper()
	var id, payload string
	var eventType, headers *string
	var created time.Time
	err := f.Pool.QueryRow(context.Background(), fmt.Sprintf(
		`SELECT id::text, payload::text, event_type, headers::text, created_at FROM %s WHERE idempotency_key = $1`, f.Table), key).
		Scan(&id, &payload, &eventType, &headers, &created)
	if err != nil {
		t.Fatalf("read row %.40q: %v", key, err)
	}
	short := key
	if len(short) > 40 {
		short = short[:40] + "…"
	}
	if string(r.Key) != key {
		t.Errorf("%q: record key differs from the idempotency_key (%d vs %d bytes)", short, len(r.Key), len(key))
	}
	if !bytes.Equal(r.Value, []byte(payload)) {
		t.Errorf("%q: value is not byte-exact:\n got  %.200q\n want %.200q", short, r.Value, payload)
	}
	one := func(name, want string) {
		t.Helper()
		got := r.header(name)
		if len(got) != 1 || got[0] != want {
			t.Errorf("%q: header %s = %.80q, want exactly one %.80q", short, name, got, want)
		}
	}
	one("idempotency_key", key)
	one("outbox_id", id)
	if v := r.header("created_at"); len(v) != 1 {
		t.Errorf("%q: created_at headers %q, want one", short, v)
	} else if ts, err := time.Parse(time.RFC3339Nano, v[0]); err != nil || !ts.Equal(created) {
		t.Errorf("%q: created_at header %q (%v), want %s", short, v[0], err, created)
	}
	if v := r.header("commit_lsn"); len(v) != 1 || r.CommitLSN == 0 {
		t.Errorf("%q: commit_lsn headers %q, want one X/X LSN", short, v)
	}
	wantHeaders := 4
	if eventType != nil {
		one("event_type", *eventType)
		wantHeaders++
	}
	if headers != nil && *headers != "null" {
		var m map[string]string
		if err := json.Unmarshal([]byte(*headers), &m); err != nil {
			t.Fatalf("%q: row headers %s: %v", short, *headers, err)
		}
		for k, v := range m {
			switch k {
			case "idempotency_key", "outbox_id", "commit_lsn", "created_at":
				continue // the contract's own, checked above
			case "event_type":
				if eventType != nil {
					continue
				}
			}
			one(k, v)
			wantHeaders++
		}
	}
	if len(r.Headers) != wantHeaders {
		t.Errorf("%q: %d headers %v, want %d", short, len(r.Headers), r.Headers, wantHeaders)
	}
}

// slotPast waits until the slot's confirmed position reaches lsn.
func slotPast(t *testing.T, f *fixture, lsn pglogrepl.LSN) {
	t.Helper()
	waitFor(t, 30*time.Second, fmt.Sprintf("slot confirmed past %s", lsn), func() bool {
		got, _, _ := f.slotState()
		return got >= lsn
	})
}

// expectedKeys lists keys as verify.Expected of one transaction each.
func expectedKeys(txn string, keys ...string) []verify.Expected {
	out := make([]verify.Expected, len(keys))
	for i, k := range keys {
		out[i] = verify.Expected{Key: k, Txn: txn, Index: i}
	}
	return out
}

// ---------------------------------------------------------------------
// Environment and configuration.

// TestCataloguePostgresUnreachable: PostgreSQL unreachable at start is
// retried (it may be a restart), not fatal: `walpost run` logs "session
// failed; reconnecting" with the error (no password) and keeps trying; a
// SIGTERM stops it at once with exit 0. `walpost check` prints FAIL for
// postgres and exits 1.
func TestCataloguePostgresUnreachable(t *testing.T) {
	f := newFixture(t, fixtureOpts{partitions: 1})
	t.Parallel()
	bad := "postgres://walpost:" + wrongPassword + "@127.0.0.1:1/walpost?sslmode=disable"
	p := f.start(append(poisonTableEnv, "WALPOST_POSTGRES_URL="+bad)...)
	started := time.Now()
	attempts := func() int {
		b, _ := os.ReadFile(p.log)
		return strings.Count(string(b), "session failed; reconnecting")
	}
	waitFor(t, 60*time.Second, "two reconnect attempts", func() bool { return attempts() >= 2 || p.exited() })
	if p.exited() {
		t.Fatalf("walpost run exited (%v) with PostgreSQL unreachable; want it to retry", p.err)
	}
	t.Logf("%d attempts within %s", attempts(), time.Since(started).Round(time.Millisecond))
	log, _ := os.ReadFile(p.log)
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, "session failed; reconnecting") {
			t.Logf("first attempt: %s", line)
			break
		}
	}
	for _, want := range []string{"127.0.0.1:1", "connection refused", "level=WARN"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("log lacks %q", want)
		}
	}
	if strings.Contains(string(log), wrongPassword) {
		t.Errorf("log contains the password")
	}
	took, err := p.signal(syscall.SIGTERM, 15*time.Second)
	if err != nil {
		t.Fatalf("after SIGTERM: %v (after %s)", err, took)
	}
	t.Logf("exit 0 %s after SIGTERM", took.Round(time.Millisecond))
	noSlot(t, f)

	r := runCheck(t, f.env("WALPOST_POSTGRES_URL="+bad))
	expectFailures(t, r, map[string][]string{"postgres": {"cannot connect", "127.0.0.1", "postgres.url", "WALPOST_POSTGRES_URL"}})
	if strings.Contains(r.Output, wrongPassword) {
		t.Errorf("check output contains the password")
	}
}

// TestCatalogueKafkaUnreachable: Kafka unreachable at start (a refused
// connection, or a broker that never answers) is retried with backoff, as
// PostgreSQL is: walpost keeps running, logs what it waits for, creates
// no slot meanwhile, and exits 0 on SIGTERM.
func TestCatalogueKafkaUnreachable(t *testing.T) {
	f := newFixture(t, fixtureOpts{partitions: 1})
	t.Parallel()
	check := func(t *testing.T, addr string) {
		p := f.start("WALPOST_KAFKA_BROKERS=" + addr)
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) && strings.Count(readFile(p.log), "kafka not reachable; retrying") < 2 {
			if p.exited() {
				t.Fatalf("walpost exited:\n%s", tail(p.log, 20))
			}
			time.Sleep(200 * time.Millisecond)
		}
		log := readFile(p.log)
		if n := strings.Count(log, "kafka not reachable; retrying"); n < 2 {
			t.Fatalf("%d retries logged, want ≥ 2:\n%s", n, tail(p.log, 20))
		}
		if !strings.Contains(log, addr) {
			t.Errorf("the log does not name the brokers %s", addr)
		}
		noSlot(t, f)
		if took, err := p.signal(syscall.SIGTERM, 15*time.Second); err != nil {
			t.Fatalf("after SIGTERM (%s): %v", took, err)
		}
	}
	t.Run("connection refused", func(t *testing.T) {
		check(t, "127.0.0.1:1")
	})
	t.Run("silent broker", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var conns []net.Conn
		var mu sync.Mutex
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, c) // read nothing, answer nothing
				mu.Unlock()
			}
		}()
		t.Cleanup(func() {
			l.Close()
			mu.Lock()
			defer mu.Unlock()
			for _, c := range conns {
				c.Close()
			}
		})
		check(t, l.Addr().String())
	})
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// TestCatalogueSlotOtherDatabase: a slot of the configured name that was
// created in another database stops walpost, naming both databases;
// walpost leaves that slot alone.
func TestCatalogueSlotOtherDatabase(t *testing.T) {
	f := newFixture(t, fixtureOpts{partitions: 1})
	t.Parallel()
	u, err := url.Parse(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/postgres"
	other := connect(t, u.String())
	execConn(t, other, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, f.Slot)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = other.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, f.Slot)
	})
	out, code := runToExit(t, f.env(poisonTableEnv...))
	assertStopped(t, out, code, "belongs to database", `"postgres"`, `not "walpost"`, f.Slot, "postgres.slot")
	var db string
	if err := other.QueryRow(context.Background(), `SELECT database FROM pg_replication_slots WHERE slot_name = $1`, f.Slot).Scan(&db); err != nil || db != "postgres" {
		t.Errorf("the other database's slot: database %q, %v; walpost must leave it alone", db, err)
	}
}

// TestCatalogueOutboxTableMissing: a postgres.table that does not exist
// stops walpost with "walpost migrate" as the fix, before any slot exists.
func TestCatalogueOutboxTableMissing(t *testing.T) {
	f := newFixture(t, fixtureOpts{partitions: 1})
	t.Parallel()
	out, code := runToExit(t, f.env("WALPOST_POSTGRES_TABLE=nope"))
	assertStopped(t, out, code, `table "nope" does not exist`, "walpost migrate", "postgres.table")
	noSlot(t, f)
}

// TestCataloguePublicationCoversOtherTable: a publication that covers
// another table besides the outbox stops walpost with the ALTER
// PUBLICATION … DROP TABLE to run, before any slot exists.
func TestCataloguePublicationCoversOtherTable(t *testing.T) {
	f := newFixture(t, fixtureOpts{partitions: 1})
	t.Parallel()
	other := randName("cat_other")
	mustExec(t, f.Pool, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY)`, other))
	t.Cleanup(func() { _, _ = f.Pool.Exec(context.Background(), fmt.Sprintf(`DROP TABLE IF EXISTS %s`, other)) })
	mustExec(t, f.Pool, fmt.Sprintf(`ALTER PUBLICATION %s ADD TABLE %s`, f.Publication, other))
	out, code := runToExit(t, f.env())
	assertStopped(t, out, code, fmt.Sprintf(`also covers "public".%q`, other), "must cover only the outbox",
		fmt.Sprintf(`ALTER PUBLICATION %s DROP TABLE "public".%q`, f.Publication, other))
	noSlot(t, f)
}

// TestCatalogueTopicMissing: kafka.topic missing and
// kafka.create_topic_partitions 0 stops walpost with the topic's name and
// the ways to fix it; walpost does not create it.
func TestCatalogueTopicMissing(t *testing.T) {
	f := newFixture(t, fixtureOpts{partitions: 1})
	t.Parallel()
	missing := randName("cat_missing")
	out, code := runToExit(t, f.env("WALPOST_KAFKA_TOPIC="+missing))
	assertStopped(t, out, code, "kafka.topic", fmt.Sprintf("%q", missing), "does not exist",
		"kafka.create_topic_partitions", "kafka-topics.sh --create")
	noSlot(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tds, err := f.Admin.ListTopics(ctx, missing)
	if err != nil {
		t.Fatal(err)
	}
	if td, ok := tds[missing]; ok && td.Err == nil {
		_, _ = f.Admin.DeleteTopics(ctx, missing)
		t.Errorf("walpost created topic %s without kafka.create_topic_partitions", missing)
	}
}

// TestCatalogueInvalidConfig: an invalid value stops walpost before it
// connects anywhere, naming the key, its variable, the value and what is
// allowed.
func TestCatalogueInvalidConfig(t *testing.T) {
	f := newFixture(t, fixtureOpts{partitions: 1})
	t.Parallel()
	out, code, took := runToStop(t, f.env("WALPOST_POISON_MAX_ATTEMPTS=-1"), 30*time.Second)
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	if took > 20*time.Second {
		t.Errorf("took %s to reject the config", took)
	}
	for _, want := range []string{"invalid config", "poison.max_attempts", "WALPOST_POISON_MAX_ATTEMPTS", `"-1"`, "at least 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	noSlot(t, f)
}

// ---------------------------------------------------------------------
// Rows.

// TestCatalogueInvalidHeaders: a headers column that is not an object of
// strings ({"a": 1}, [1,2], {"a": null}) cannot become a record: each such
// event is quarantined with INVALID_HEADERS after poison.max_attempts; its
// neighbours (also in the same transaction) are delivered, a JSON null
// headers value counts as no headers, and the slot moves past them all.
func TestCatalogueInvalidHeaders(t *testing.T) {
	f := newFixture(t, fixtureOpts{partitions: 1})
	t.Parallel()
	startCatalogue(t, f)
	insertTxn(t, f, []outboxRow{
		{key: "h-before", payloadTx: `{"n": 1}`, headers: ptr(`{"trace": "t-1"}`)},
		{key: "h-number", payloadTx: `{"n": 2}`, headers: ptr(`{"a": 1}`)},
		{key: "h-mid", payloadTx: `{"n": 3}`},
		{key: "h-array", payloadTx: `{"n": 4}`, headers: ptr(`[1,2]`)},
		{key: "h-jsonnull", payloadTx: `{"n": 5}`, headers: ptr(`null`)},
	})
	insertTxn(t, f, []outboxRow{{key: "h-nullvalue", payloadTx: `{"n": 6}`, headers: ptr(`{"a": null, "b": "ok"}`)}})
	insertTxn(t, f, []outboxRow{{key: "h-after", payloadTx: `{"n": 7}`, headers: ptr(`{}`)}})
	end := f.currentWAL()

	want := append(expectedKeys("1", "h-before", "h-mid", "h-jsonnull"), expectedKeys("3", "h-after")...)
	expectDelivered(t, f, consumeRecords(t, f, len(want), 60*time.Second), want)
	rows := waitPoison(t, f, 3)
	wantPoison := map[string]string{"h-number": `{"a": 1}`, "h-array": `[1, 2]`, "h-nullvalue": `{"a": null, "b": "ok"}`}
	if len(rows) != len(wantPoison) {
		t.Errorf("poison rows %+v, want %d", rows, len(wantPoison))
	}
	for _, r := range rows {
		h, ok := wantPoison[r.Key]
		if !ok || r.Class != "INVALID_HEADERS" || r.Attempts != 2 || r.Headers == nil || *r.Headers != h ||
			!strings.Contains(r.LastError, "headers must be a JSON object of strings") {
			t.Errorf("poison row %+v (headers %v), want INVALID_HEADERS, 2 attempts, headers %s", r, deref(r.Headers), h)
		}
	}
	slotPast(t, f, end)
}

// TestCatalogueNullPayload: where the payload column allows NULL, a NULL
// payload is quarantined with NULL_PAYLOAD (its record would be a
// tombstone and delete the key from a compacted topic); no record with
// that key reaches the topic.
func TestCatalogueNullPayload(t *testing.T) {
	f := newFixture(t, fixtureOpts{partitions: 1})
	mustExec(t, f.Pool, fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN payload DROP NOT NULL`, f.Table))
	t.Parallel()
	startCatalogue(t, f)
	insertTxn(t, f, []outboxRow{
		{key: "n-before", payloadTx: `{"n": 1}`},
		{key: "n-null", payload: ptr("NULL")},
		{key: "n-after", payloadTx: `{"n": 3}`},
	})
	// A JSON null is a value, not a NULL: delivered as the 4 bytes "null".
	insertTxn(t, f, []outboxRow{{key: "n-jsonnull", payloadTx: `null`}})
	end := f.currentWAL()

	want := append(expectedKeys("1", "n-before", "n-after"), expectedKeys("2", "n-jsonnull")...)
	expectDelivered(t, f, consumeRecords(t, f, len(want), 60*time.Second), want)
	rows := waitPoison(t, f, 1)
	if len(rows) != 1 || rows[0].Key != "n-null" || rows[0].Class != "NULL_PAYLOAD" || rows[0].Attempts != 2 ||
		rows[0].Payload != nil || !strings.Contains(rows[0].LastError, "tombstone") {
		t.Errorf("poison rows %+v, want n-null with NULL_PAYLOAD, 2 attempts, payload NULL", rows)
	}
	slotPast(t, f, end)
}

// TestCatalogueDeeplyNestedPayload: a jsonb nested 500 levels deep is
// delivered byte-exact as PostgreSQL renders it.
func TestCatalogueDeeplyNestedPayload(t *testing.T) {
	f := newFixture(t, fixtureOpts{partitions: 1})
	t.Parallel()
	startCatalogue(t, f)
	insertTxn(t, f, []outboxRow{
		{key: "d-arrays", payload: ptr(`(repeat('[', 500) || repeat(']', 500))::jsonb`)},
		{key: "d-objects", payload: ptr(`(repeat('{"a": ', 500) || '"leaf"' || repeat('}', 500))::jsonb`)},
	})
	end := f.currentWAL()
	want := expectedKeys("1", "d-arrays", "d-objects")
	recs := consumeRecords(t, f, len(want), 60*time.Second)
	expectDelivered(t, f, recs, want)
	for _, r := range recs {
		if string(r.Key) == "d-arrays" && string(r.Value) != strings.Repeat("[", 500)+strings.Repeat("]", 500) {
			t.Errorf("d-arrays value %.60q…", r.Value)
		}
	}
	if n := len(poisonRows(t, f)); n != 0 {
		t.Errorf("%d poison rows, want 0", n)
	}
	slotPast(t, f, end)
}

// TestCatalogueHugeIdempotencyKey: a 10 KB idempotency_key is delivered,
// as the record key and the idempotency_key header. (PostgreSQL itself
// refuses a key whose compressed form exceeds the unique index's 2704-byte
// limit, SQLSTATE 54000, so such a row never exists.)
func TestCatalogueHugeIdempotencyKey(t *testing.T) {
	f := newFixture(t, fixtureOpts{partitions: 3})
	t.Parallel()
	startCatalogue(t, f)
	var b strings.Builder
	for i := 0; b.Len() < 10*1024; i++ {
		fmt.Fprintf(&b, "order-%06d|", i)
	}
	key := b.String()[:10*1024]
	insertTxn(t, f, []outboxRow{{key: "k-small", payloadTx: `{}`}, {key: key, payloadTx: `{"big": "key"}`}})

	raw := make([]byte, 5*1024)
	_, _ = rand.Read(raw)
	random := hex.EncodeToString(raw) // 10 KB that pglz cannot compress
	_, err := f.Pool.Exec(context.Background(), fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES ($1, '{}')`, f.Table), random)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "54000" {
		t.Errorf("insert of an incompressible 10 KB key: %v, want SQLSTATE 54000 (index row size)", err)
	}
	end := f.currentWAL()
	recs := consumeRecords(t, f, 2, 60*time.Second)
	// Different partitions: Validate checks order within each.
	expectDelivered(t, f, recs, []verify.Expected{{Key: "k-small", Txn: "1", Index: 0}, {Key: key, Txn: "1", Index: 1}})
	for _, r := range recs {
		if h := r.header("idempotency_key"); len(r.Key) == len(key) && (string(r.Key) != key || len(h) != 1 || h[0] != key) {
			t.Errorf("10 KB key or header altered")
		}
	}
	if n := len(poisonRows(t, f)); n != 0 {
		t.Errorf("%d poison rows, want 0", n)
	}
	slotPast(t, f, end)
}

// TestCatalogueNonUTF8Text: PostgreSQL (UTF8 database) refuses invalid
// UTF-8 in text and jsonb with SQLSTATE 22021, whether as an escape in the
// SQL text, from convert_from or as a bound parameter, so nothing reaches
// walpost; valid non-ASCII text (emoji, CJK, combining marks, an RTL
// script) in the key, payload, event_type and headers is delivered
// byte-exact.
func TestCatalogueNonUTF8Text(t *testing.T) {
	f := newFixture(t, fixtureOpts{partitions: 1})
	t.Parallel()
	startCatalogue(t, f)
	ctx := context.Background()
	refused := []struct {
		name string
		sql  string
		args []any
	}{
		{"E'\\xff' key", fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES (E'bad-\xff', '{}')`, f.Table), nil},
		{"convert_from key", fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES (convert_from('\xff'::bytea, 'UTF8'), '{}')`, f.Table), nil},
		{"parameter key", fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES ($1, '{}')`, f.Table), []any{"bad-\xff\xfe"}},
		{"parameter payload", fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES ('bad-payload', $1::jsonb)`, f.Table), []any{"{\"a\": \"\xc3\x28\"}"}},
		{"parameter header", fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload, headers) VALUES ('bad-header', '{}', $1::jsonb)`, f.Table), []any{"{\"a\": \"\xed\xa0\x80\"}"}},
	}
	for _, r := range refused {
		_, err := f.Pool.Exec(ctx, r.sql, r.args...)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22021" {
			t.Errorf("%s: %v, want SQLSTATE 22021 (invalid byte sequence)", r.name, err)
		}
	}
	key := "キー-😀-e\u0301-עברית-鍵"
	insertTxn(t, f, []outboxRow{
		{key: "u-ascii", payloadTx: `{"a": "plain"}`},
		{key: key, payloadTx: "{\"emoji\": \"😀👍🏽\", \"cjk\": \"漢字かなカナ한글\", \"combining\": \"e\u0301 n\u0303 a\u0308\", \"escaped\": \"\\u00e9\\ud83d\\ude00\", \"rtl\": \"مرحبا\"}",
			eventType: ptr("ordre.créé-注文"), headers: ptr(`{"trace": "🧵-スレッド", "名前": "é"}`)},
	})
	end := f.currentWAL()
	want := expectedKeys("1", "u-ascii", key)
	recs := consumeRecords(t, f, len(want), 60*time.Second)
	expectDelivered(t, f, recs, want)
	for _, r := range recs {
		if string(r.Key) == key && !bytes.Contains(r.Value, []byte("\"escaped\": \"é😀\"")) {
			t.Errorf("JSON escapes not rendered as PostgreSQL does: %s", r.Value)
		}
	}
	if n := len(poisonRows(t, f)); n != 0 {
		t.Errorf("%d poison rows, want 0", n)
	}
	slotPast(t, f, end)
}

// TestCatalogueEmptyIdempotencyKey: an empty idempotency_key (the empty string passes
// NOT NULL) is quarantined with EMPTY_KEY; its neighbours are delivered.
func TestCatalogueEmptyIdempotencyKey(t *testing.T) {
	f := newFixture(t, fixtureOpts{partitions: 1})
	t.Parallel()
	startCatalogue(t, f)
	insertTxn(t, f, []outboxRow{
		{key: "e-before", payloadTx: `{"n": 1}`},
		{key: "", payloadTx: `{"n": 2}`, eventType: ptr("empty.key")},
		{key: "e-after", payloadTx: `{"n": 3}`},
	})
	end := f.currentWAL()
	want := expectedKeys("1", "e-before", "e-after")
	expectDelivered(t, f, consumeRecords(t, f, len(want), 60*time.Second), want)
	rows := waitPoison(t, f, 1)
	if len(rows) != 1 || rows[0].Key != "" || rows[0].Class != "EMPTY_KEY" || rows[0].Attempts != 2 ||
		rows[0].Payload == nil || *rows[0].Payload != `{"n": 2}` {
		t.Errorf("poison rows %+v, want the empty key with EMPTY_KEY, 2 attempts and its payload", rows)
	}
	slotPast(t, f, end)
}

// TestCatalogueForgedContractHeader: a row header named like one of the
// contract's (idempotency_key, outbox_id, commit_lsn, created_at, and
// event_type when the row has one) does not override it: the record
// carries the real value, exactly once; other row headers pass through.
// Without an event_type column value, a row header event_type is an
// ordinary header.
func TestCatalogueForgedContractHeader(t *testing.T) {
	f := newFixture(t, fixtureOpts{partitions: 1})
	t.Parallel()
	startCatalogue(t, f)
	insertTxn(t, f, []outboxRow{
		{key: "f-key", payloadTx: `{"n": 1}`, headers: ptr(`{"idempotency_key": "forged"}`)},
		{key: "f-all", payloadTx: `{"n": 2}`, eventType: ptr("real.type"),
			headers: ptr(`{"idempotency_key": "forged", "outbox_id": "forged", "commit_lsn": "0/0", "created_at": "forged", "event_type": "forged", "x": "y"}`)},
		{key: "f-evtype", payloadTx: `{"n": 3}`, headers: ptr(`{"event_type": "from.header"}`)},
	})
	end := f.currentWAL()
	want := expectedKeys("1", "f-key", "f-all", "f-evtype")
	recs := consumeRecords(t, f, len(want), 60*time.Second)
	expectDelivered(t, f, recs, want)
	for _, r := range recs {
		for _, h := range r.Headers {
			if string(h.Value) == "forged" {
				t.Errorf("%s: forged header %s reached the record", r.Key, h.Key)
			}
		}
		if got := r.header("idempotency_key"); len(got) != 1 || got[0] != string(r.Key) {
			t.Errorf("%s: idempotency_key headers %q, want exactly [%s]", r.Key, got, r.Key)
		}
		if string(r.Key) == "f-evtype" {
			if got := r.header("event_type"); len(got) != 1 || got[0] != "from.header" {
				t.Errorf("f-evtype: event_type headers %q", got)
			}
		}
	}
	if n := len(poisonRows(t, f)); n != 0 {
		t.Errorf("%d poison rows, want 0", n)
	}
	slotPast(t, f, end)
}

func deref(s *string) string {
	if s == nil {
		return "<NULL>"
	}
	return *s
}

// TestTopicCreatedJustBeforeStart: a topic that may reach the broker's
// metadata a moment after walpost starts (a deployment that creates the
// topic and starts walpost right after) is found, not reported missing.
func TestTopicCreatedJustBeforeStart(t *testing.T) {
	f := newFixture(t, fixtureOpts{partitions: 1})
	t.Parallel()
	late := randName("late")
	// Created first and walpost started the moment CreateTopic returns: the
	// controller has the topic, the broker's metadata may not yet. Creating
	// it after a sleep behind walpost's start raced the topic grace period.
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	resp, err := f.Admin.CreateTopic(cctx, 1, -1, nil, late)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic: %v", err)
	}
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer dcancel()
		_, _ = f.Admin.DeleteTopics(dctx, late)
	})
	p := f.start("WALPOST_KAFKA_TOPIC="+late, "WALPOST_LOG_LEVEL=debug")
	if !p.waitLog("msg=streaming", 30*time.Second) {
		t.Fatalf("walpost did not start streaming (exited: %v)", p.exited())
	}
	keys := []string{randName("k")}
	if _, err := f.writeTxn(context.Background(), "late", keys, `{"n": 1}`); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(late), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("the event never arrived in the late topic")
		}
		var got []string
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Key)) })
		if len(got) > 0 {
			if got[0] != keys[0] {
				t.Fatalf("got key %q, want %q", got[0], keys[0])
			}
			return
		}
	}
}
