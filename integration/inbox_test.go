package integration

import (
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/writer"
)

// TestInboxEndToEnd: writer → walpost (at-least-once) → inbox.Consumer.
// 8 writers debit 20 accounts through writer.Insert (one outbox row per
// debit, some too large for the topic's max.message.bytes and so
// quarantined); walpost is killed -9 once and restarted; the consumer, a
// child process crediting another table through inbox.Consumer, is killed
// -9 several times and restarted; the limit is raised and the quarantined
// debits replayed. At the end every account's credits equal its debits,
// and the inbox's state is one watermark row per partition plus one key
// row per replayed record.
func TestInboxEndToEnd(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 3, topicConfig: map[string]*string{"max.message.bytes": ptr("4096")}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	accounts := "accounts_" + f.Slot
	mustExec(t, f.Pool, fmt.Sprintf(`CREATE TABLE %s (id text PRIMARY KEY, debited bigint NOT NULL DEFAULT 0)`, accounts))
	t.Cleanup(func() { _, _ = f.Pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+accounts) })
	mustExec(t, f.Pool, fmt.Sprintf(`INSERT INTO %s SELECT 'acct-' || i FROM generate_series(0, 19) AS i`, accounts))
	consumer := newInboxSchema(t, f)
	outbox, err := writer.NewTable(f.Table)
	if err != nil {
		t.Fatal(err)
	}

	p := f.start("WALPOST_POISON_MAX_ATTEMPTS=2", "WALPOST_POISON_BACKOFF=10ms", "WALPOST_POISON_MAX_RATE=10000")
	waitStreaming(t, p)
	child := consumer.start(t, false)

	// 8 writers, each debit with its event in one transaction.
	var written, oversized atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := mrand.New(mrand.NewPCG(uint64(w), 7))
			for {
				select {
				case <-stop:
					return
				default:
				}
				acct := fmt.Sprintf("acct-%d", rng.IntN(20))
				amount := 1 + rng.IntN(100)
				memo := ""
				if rng.IntN(1000) == 0 {
					memo = strings.Repeat("m", 6000) // over max.message.bytes: quarantined
				}
				payload, _ := json.Marshal(map[string]any{"event": "account.debited", "account": acct, "amount": amount, "memo": memo})
				err := pgx.BeginFunc(ctx, f.Pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, `UPDATE `+accounts+` SET debited = debited + $2 WHERE id = $1`, acct, amount); err != nil {
						return err
					}
					return outbox.Insert(ctx, tx, writer.Event{Key: writer.NewKey(), Payload: payload, EventType: "account.debited", PartitionKey: acct})
				})
				if err != nil {
					errs <- err
					return
				}
				written.Add(1)
				if memo != "" {
					oversized.Add(1)
				}
			}
		}()
	}
	stopWriters := func() {
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("writer: %v", err)
		}
	}
	progress := func(what string, n int64) {
		t.Helper()
		waitProgress(t, 60*time.Second, 5*time.Minute, what, func() (bool, string) {
			c := consumer.credited(t)
			return c >= n, fmt.Sprintf("%d of %d credited", c, n)
		})
	}

	// The consumer killed -9 four times, each after it credited more; the
	// second restart reads the topic from its start, as after a group
	// reset: every record it had applied comes again.
	kills := 0
	for i := range 4 {
		progress("the consumer to credit more", consumer.credited(t)+5000)
		child.kill()
		kills++
		child = consumer.start(t, i == 1)
	}
	// walpost killed -9 once, mid-stream.
	progress("the consumer to credit more", consumer.credited(t)+5000)
	p.kill()
	p = f.start("WALPOST_POISON_MAX_ATTEMPTS=2", "WALPOST_POISON_BACKOFF=10ms", "WALPOST_POISON_MAX_RATE=10000")
	waitStreaming(t, p)
	progress("the consumer to credit more", consumer.credited(t)+5000)
	child.kill()
	kills++
	child = consumer.start(t, false)
	stopWriters()
	t.Logf("%d debits written, %d oversized", written.Load(), oversized.Load())
	if oversized.Load() == 0 {
		t.Fatal("no debit was oversized: the poison replay is not exercised")
	}

	// Every oversized debit quarantined; then fix the cause and replay
	// them.
	// walpost drains the writers' backlog, isolating each oversized debit:
	// slow on a loaded machine, so the wait fails only when neither the
	// quarantines nor the slot move for a minute.
	waitProgress(t, 60*time.Second, 5*time.Minute, "every oversized debit quarantined", func() (bool, string) {
		var n int64
		_ = f.Pool.QueryRow(ctx, `SELECT count(DISTINCT idempotency_key) FROM `+f.PoisonTable).Scan(&n)
		lsn, _, _ := f.slotState()
		return n >= oversized.Load(), fmt.Sprintf("%d of %d quarantined, slot confirmed %s", n, oversized.Load(), lsn)
	})
	raiseMaxMessageBytes(t, f, f.Topic)
	if out, err := replayPoison(t, f.env(), "--all"); err != nil {
		t.Fatalf("poison replay: %v\n%s", err, out)
	}

	// Every account's credits equal its debits: wait for it, then check
	// that nothing more arrives once the topic is read to its end.
	debits := func() map[string]int64 { return sums(t, f.Pool, `SELECT id, debited FROM `+accounts) }
	want := debits()
	settled := func() {
		t.Helper()
		waitFor(t, 90*time.Second, "credits equal to debits", func() bool {
			got := consumer.credits(t)
			for acct, n := range got {
				if n > want[acct] { // final: a credit is never taken back
					t.Fatalf("account %s credited %d, debited %d: applied twice", acct, n, want[acct])
				}
			}
			return equalSums(got, want)
		})
	}
	settled()
	// Once more from the topic's start: the replayed records come again
	// and the key table, not the watermark, recognises them.
	child.kill()
	kills++
	mustExec(t, consumer.pool, `UPDATE inbox_watermark SET next_offset = -1`) // a reset of the group's offsets
	child = consumer.start(t, true)
	ends := consumer.waitCaughtUp(t, f)
	settled()
	child.kill()
	got := consumer.credits(t)
	if !equalSums(got, want) {
		t.Fatalf("credits %v\ndebits  %v", got, want)
	}
	var marks, keys int
	if err := consumer.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM inbox_watermark), (SELECT count(*) FROM inbox_key)`).Scan(&marks, &keys); err != nil {
		t.Fatal(err)
	}
	copies, dups := deliveries(t, f)
	t.Logf("%d records in the topic (ends %v), %d events delivered more than once; consumer killed -9 %d times, walpost once; state: %d watermark rows, %d key rows",
		copies, ends, dups, kills, marks, keys)
	if marks != f.Partitions || int64(keys) != oversized.Load() {
		t.Fatalf("state: %d watermark rows (want %d), %d key rows (want %d, the replayed records)", marks, f.Partitions, keys, oversized.Load())
	}
}

// inboxSchema is the consumer's database: a schema of its own holding the
// inbox's tables and the credits.
type inboxSchema struct {
	f      *fixture
	schema string
	pool   *pgxpool.Pool
	group  string
	// keyEvery runs the consumer with inbox.Config.KeyEveryEvent.
	keyEvery bool
}

func newInboxSchema(t *testing.T, f *fixture) *inboxSchema {
	t.Helper()
	s := &inboxSchema{f: f, schema: "inbox_" + f.Slot, group: "clearing_" + f.Slot}
	mustExec(t, f.Pool, `CREATE SCHEMA `+s.schema)
	t.Cleanup(func() { _, _ = f.Pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+s.schema+` CASCADE`) })
	cfg, err := pgxpool.ParseConfig(f.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = s.schema
	if s.pool, err = pgxpool.NewWithConfig(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.pool.Close)
	if err := inbox.Migrate(context.Background(), s.pool); err != nil {
		t.Fatal(err)
	}
	mustExec(t, s.pool, `CREATE TABLE credits (account text PRIMARY KEY, credited bigint NOT NULL, events bigint NOT NULL)`)
	return s
}

// child is a consumer process.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (c *child) kill() {
	_ = c.cmd.Process.Kill() // SIGKILL
	<-c.done
}

// start runs TestInboxConsumerProcess in a child process of this test
// binary, consuming the fixture's topic into the schema; fromStart makes it
// read every partition from its first offset.
func (s *inboxSchema) start(t *testing.T, fromStart bool) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestInboxConsumerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(),
		"WALPOST_INBOX_CHILD_PG="+s.f.PGURL, "WALPOST_INBOX_CHILD_SCHEMA="+s.schema,
		"WALPOST_INBOX_CHILD_BROKERS="+strings.Join(brokers, ","), "WALPOST_INBOX_CHILD_TOPIC="+s.f.Topic,
		"WALPOST_INBOX_CHILD_GROUP="+s.group, fmt.Sprintf("WALPOST_INBOX_CHILD_FROM_START=%v", fromStart))
	if s.keyEvery {
		cmd.Env = append(cmd.Env, "WALPOST_INBOX_CHILD_KEY_EVERY=1")
	}
	log, err := os.CreateTemp(t.TempDir(), "consumer-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(c.done)
	}()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			c.kill()
		}
		if t.Failed() {
			t.Logf("consumer log %s:\n%s", log.Name(), tail(log.Name(), 30))
		}
	})
	return c
}

// TestInboxConsumerProcess is the consumer of TestInboxEndToEnd, run in a
// child process; it skips when run any other way.
func TestInboxConsumerProcess(t *testing.T) {
	url := os.Getenv("WALPOST_INBOX_CHILD_PG")
	if url == "" {
		t.Skip("the consumer process of TestInboxEndToEnd")
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = os.Getenv("WALPOST_INBOX_CHILD_SCHEMA")
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	in, err := inbox.New(inbox.Config{Group: os.Getenv("WALPOST_INBOX_CHILD_GROUP"), KeyEveryEvent: os.Getenv("WALPOST_INBOX_CHILD_KEY_EVERY") == "1"})
	if err != nil {
		t.Fatal(err)
	}
	// A static member: a restarted process takes its predecessor's place
	// at once, without waiting out the dead one's session.
	opts := []kgo.Opt{kgo.FetchMaxWait(100 * time.Millisecond), kgo.InstanceID("consumer-1"), kgo.SessionTimeout(6 * time.Second)}
	if os.Getenv("WALPOST_INBOX_CHILD_FROM_START") == "true" {
		opts = append(opts, kgo.AdjustFetchOffsetsFn(func(_ context.Context, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
			for _, ps := range offs {
				for p := range ps {
					ps[p] = kgo.NewOffset().AtStart()
				}
			}
			return offs, nil
		}))
	}
	c, err := inbox.NewConsumer(inbox.ConsumerConfig{
		Inbox:          in,
		DB:             pool,
		Brokers:        strings.Split(os.Getenv("WALPOST_INBOX_CHILD_BROKERS"), ","),
		Topics:         []string{os.Getenv("WALPOST_INBOX_CHILD_TOPIC")},
		MaxPollRecords: 200,
		KafkaOpts:      opts,
		Handle: func(ctx context.Context, tx pgx.Tx, rec *kgo.Record) error {
			var ev struct {
				Account string `json:"account"`
				Amount  int64  `json:"amount"`
			}
			if err := json.Unmarshal(rec.Value, &ev); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO credits VALUES ($1, $2, 1)
				ON CONFLICT (account) DO UPDATE SET credited = credits.credited + EXCLUDED.credited, events = credits.events + 1`, ev.Account, ev.Amount)
			return err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A consumer's supervisor: Run again after a failed batch (PostgreSQL
	// crashed under it); the batch comes again.
	for {
		err := c.Run(ctx)
		if err == nil {
			return
		}
		t.Logf("consumer: %v; running it again", err)
		time.Sleep(200 * time.Millisecond)
	}
}

// credited is how many debits were credited. A query the restarted
// PostgreSQL refused on a connection of before its crash is asked again.
func (s *inboxSchema) credited(t *testing.T) int64 {
	var n int64
	waitFor(t, 30*time.Second, "the consumer's database to answer", func() bool {
		return s.pool.QueryRow(context.Background(), `SELECT coalesce(sum(events), 0) FROM credits`).Scan(&n) == nil
	})
	return n
}

func (s *inboxSchema) credits(t *testing.T) map[string]int64 {
	return sums(t, s.pool, `SELECT account, credited FROM credits`)
}

// waitCaughtUp waits until the watermark rows' offsets reach every
// partition's end: the consumer has handled every record in the topic.
func (s *inboxSchema) waitCaughtUp(t *testing.T, f *fixture) map[int32]int64 {
	ctx := context.Background()
	ends, err := f.Admin.ListEndOffsets(ctx, f.Topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { want[o.Partition] = o.Offset })
	waitFor(t, 60*time.Second, "the consumer at the topic's end", func() bool {
		got := sums(t, s.pool, `SELECT partition::text, next_offset FROM inbox_watermark`)
		for p, end := range want {
			if got[fmt.Sprint(p)] < end {
				return false
			}
		}
		return true
	})
	return want
}

// sums reads q's (text, bigint) rows into a map, asking again after an
// error (a connection from before a PostgreSQL crash).
func sums(t *testing.T, pool *pgxpool.Pool, q string) map[string]int64 {
	var out map[string]int64
	var last error
	waitFor(t, 30*time.Second, "the database to answer "+q, func() bool {
		out, last = querySums(pool, q)
		return last == nil
	})
	return out
}

func querySums(pool *pgxpool.Pool, q string) (map[string]int64, error) {
	rows, err := pool.Query(context.Background(), q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var v int64
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, rows.Err()
}

func equalSums(got, want map[string]int64) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	for k, v := range got {
		if want[k] != v {
			return false
		}
	}
	return true
}

// deliveries reads the whole topic: records in it, and events in it more
// than once.
func deliveries(t *testing.T, f *fixture) (records, dups int) {
	count := map[string]int{}
	ends, err := f.Admin.ListEndOffsets(context.Background(), f.Topic)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	f.read(t, 60*time.Second, 0, func(r *kgo.Record) {
		records++
		count[string(r.Key)]++
	}, func() bool { return int64(records) >= total })
	for _, n := range count {
		if n > 1 {
			dups++
		}
	}
	return records, dups
}
