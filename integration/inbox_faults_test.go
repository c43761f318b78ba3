package integration

import (
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/walpost/walpost/writer"
)

// debitLoad is 8 writers debiting 20 accounts through writer.Insert, one
// outbox row per debit, going on through PostgreSQL's crashes: a debit
// whose transaction failed is simply not counted (the accounts table,
// written in the same transaction, is the truth).
type debitLoad struct {
	written, oversized atomic.Int64
	bigOn              atomic.Bool // some debits too large for the topic
	stop               chan struct{}
	wg                 sync.WaitGroup
}

func startDebits(t *testing.T, f *fixture, accounts string) *debitLoad {
	outbox, err := writer.NewTable(f.Table)
	if err != nil {
		t.Fatal(err)
	}
	l := &debitLoad{stop: make(chan struct{})}
	l.bigOn.Store(true)
	ctx := context.Background()
	for w := range 8 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			rng := mrand.New(mrand.NewPCG(uint64(w), 11))
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				acct := fmt.Sprintf("acct-%d", rng.IntN(20))
				amount := 1 + rng.IntN(100)
				memo := ""
				if l.bigOn.Load() && rng.IntN(1000) == 0 {
					memo = strings.Repeat("m", 6000)
				}
				payload, _ := json.Marshal(map[string]any{"event": "account.debited", "account": acct, "amount": amount, "memo": memo})
				err := pgx.BeginFunc(ctx, f.Pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, `UPDATE `+accounts+` SET debited = debited + $2 WHERE id = $1`, acct, amount); err != nil {
						return err
					}
					return outbox.Insert(ctx, tx, writer.Event{Key: writer.NewKey(), Payload: payload, EventType: "account.debited", PartitionKey: acct})
				})
				if err != nil {
					select { // PostgreSQL is down: wait for it, or the stop
					case <-l.stop:
						return
					case <-time.After(100 * time.Millisecond):
					}
					continue
				}
				l.written.Add(1)
				if memo != "" {
					l.oversized.Add(1)
				}
			}
		}()
	}
	return l
}

func (l *debitLoad) finish() {
	close(l.stop)
	l.wg.Wait()
}

// TestInboxEndToEndFaults is issue 32's acceptance run: about 100,000
// debits from 8 writers; walpost (at-least-once) killed -9, PostgreSQL
// crashed (immediate stop) and restarted, Kafka cut off from walpost, then
// killed (SIGKILL: the stack's broker, so the test runs alone) and started
// again, the quarantined debits replayed, the slot dropped and walpost recover run
// while writes go on (recover re-sends every row of its margin); the
// consumer process, with KeyEveryEvent for recover's margin, killed -9
// after each fault. At the end every account's credits equal its debits.
// About 2 minutes: WALPOST_INBOX_FAULTS=1 (WALPOST_INBOX_FAULTS_STEP sets
// the credits between faults, default 15,000).
func TestInboxEndToEndFaults(t *testing.T) {
	if os.Getenv("WALPOST_INBOX_FAULTS") != "1" {
		t.Skip("a long run: WALPOST_INBOX_FAULTS=1")
	}
	step := int64(15000)
	if v, err := strconv.Atoi(os.Getenv("WALPOST_INBOX_FAULTS_STEP")); err == nil && v > 0 {
		step = int64(v)
	}
	f := ownFixture(t, 3)
	ctx := context.Background()
	_, err := f.Admin.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: ptr("4096")}}, f.Topic)
	if err != nil {
		t.Fatal(err)
	}
	accounts := "accounts_" + f.Slot
	mustExec(t, f.Pool, fmt.Sprintf(`CREATE TABLE %s (id text PRIMARY KEY, debited bigint NOT NULL DEFAULT 0)`, accounts))
	mustExec(t, f.Pool, fmt.Sprintf(`INSERT INTO %s SELECT 'acct-' || i FROM generate_series(0, 19) AS i`, accounts))
	consumer := newInboxSchema(t, f)
	consumer.keyEvery = true
	proxy, seed := kafkaProxy(t)
	env := []string{"WALPOST_KAFKA_BROKERS=" + seed, "WALPOST_POISON_MAX_ATTEMPTS=2", "WALPOST_POISON_BACKOFF=10ms", "WALPOST_POISON_MAX_RATE=10000"}

	p := f.start(env...)
	waitStreaming(t, p)
	child := consumer.start(t, false)
	load := startDebits(t, f, accounts)
	defer func() {
		select {
		case <-load.stop:
		default:
			load.finish()
		}
	}()
	progress := func(what string) {
		t.Helper()
		target := consumer.credited(t) + step
		waitFor(t, 2*time.Minute, "the consumer to credit more "+what, func() bool { return consumer.credited(t) >= target })
	}
	restartConsumer := func() {
		child.kill()
		child = consumer.start(t, false)
	}
	kills := 0

	progress("at the start")
	restartConsumer()
	kills++

	progress("before walpost is killed")
	p.kill()
	p = f.start(env...)
	waitStreaming(t, p)
	restartConsumer()
	kills++

	progress("before PostgreSQL crashes")
	streams := logCount(p, "msg=streaming")
	f.pg(t, "pg-stop", "immediate")
	f.pg(t, "pg-start")
	waitStreamingAgain(t, p, streams, 2*time.Minute)
	t.Log("PostgreSQL crashed and restarted")
	restartConsumer()
	kills++

	progress("before Kafka is cut off")
	throughProxy(t, proxy)
	proxy.Cut()
	sleepAlive(t, p, 5*time.Second, "while Kafka was cut off")
	proxy.Restore()
	t.Log("Kafka cut off from walpost for 5 s")
	restartConsumer()
	kills++

	progress("before Kafka is killed")
	stackCtl(t, "kafka-stop", "kill")
	sleepAlive(t, p, 5*time.Second, "while Kafka was down")
	stackCtl(t, "kafka-start")
	t.Log("Kafka killed (SIGKILL) and started again after 5 s")
	restartConsumer()
	kills++

	// The quarantined debits: fix the cause and replay them.
	progress("before the replay")
	load.bigOn.Store(false)
	waitFor(t, time.Minute, "every oversized debit quarantined", func() bool {
		var n int64
		_ = f.Pool.QueryRow(ctx, `SELECT count(DISTINCT idempotency_key) FROM `+f.PoisonTable).Scan(&n)
		return n >= load.oversized.Load()
	})
	raiseMaxMessageBytes(t, f, f.Topic)
	if out, err := replayPoison(t, f.env(env...), "--all"); err != nil {
		t.Fatalf("poison replay: %v\n%s", err, out)
	}
	t.Logf("%d quarantined debits replayed", load.oversized.Load())
	restartConsumer()
	kills++

	// The slot lost while walpost is down; recover while writes go on.
	progress("before the slot is lost")
	p.kill()
	waitFor(t, 30*time.Second, "the slot released", func() bool { _, active, _ := f.slotState(); return !active })
	waitFor(t, 30*time.Second, "the slot dropped", func() bool { // a pooled connection may predate the crash
		_, err := f.Pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, f.Slot)
		return err == nil
	})
	before := load.written.Load()
	waitFor(t, time.Minute, "debits in the gap", func() bool { return load.written.Load() >= before+2000 })
	_, code := recoveryCommand(t, f.env(env...), "recover")
	if code != 0 {
		t.Fatalf("walpost recover: exit %d", code)
	}
	p = f.start(env...)
	waitStreaming(t, p)
	restartConsumer()
	kills++

	progress("after recover")
	load.finish()
	want := sums(t, f.Pool, `SELECT id, debited FROM `+accounts)
	waitFor(t, 3*time.Minute, "credits equal to debits", func() bool {
		got := consumer.credits(t)
		for acct, n := range got {
			if n > want[acct] {
				t.Fatalf("account %s credited %d, debited %d: applied twice", acct, n, want[acct])
			}
		}
		return equalSums(got, want)
	})
	ends := consumer.waitCaughtUp(t, f)
	child.kill()
	if got := consumer.credits(t); !equalSums(got, want) {
		t.Fatalf("credits %v\ndebits  %v", got, want)
	}
	var marks, keys, events int64
	waitFor(t, 30*time.Second, "the state counted", func() bool {
		return consumer.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM inbox_watermark), (SELECT count(*) FROM inbox_key),
			(SELECT sum(events) FROM credits)`).Scan(&marks, &keys, &events) == nil
	})
	copies, dups := deliveries(t, f)
	t.Logf("%d debits written (%d oversized), %d credited; %d records in the topic (ends %v), %d events in it more than once; consumer killed -9 %d times; state: %d watermark rows, %d key rows",
		load.written.Load(), load.oversized.Load(), events, copies, ends, dups, kills, marks, keys)
	if marks != int64(f.Partitions) || keys != events {
		t.Fatalf("state: %d watermark rows (want %d), %d key rows (want %d: KeyEveryEvent)", marks, f.Partitions, keys, events)
	}
}
