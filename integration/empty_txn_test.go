package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

// emptyTxnFlood is how many transactions without outbox rows the flood
// commits, and emptyTxnGrowthKiB the bound on walpost's RSS growth while
// it reads them. An entry per transaction (the tracker before empty
// transactions coalesced) costs well over 100 bytes each: 250,000 of them
// grow RSS past the bound (with Seal's merge off, the test fails), while
// the coalescing tracker stays within a few MiB of noise.
const (
	emptyTxnFlood     = 250_000
	emptyTxnGrowthKiB = 12 * 1024
	// emptyTxnIdleUpdates is how many status updates walpost sends with
	// the stream idle behind the unacknowledged event, after it read the
	// flood, before Kafka comes back (RSS sampled throughout).
	emptyTxnIdleUpdates = 3
)

// TestEmptyTransactionsDuringKafkaOutage: Kafka is down with one outbox
// event in flight while an unrelated workload commits 250,000 transactions, and
// stays down until walpost read them all and sent three status updates
// idle behind the event.
// PostgreSQL 15 drops empty transactions of unpublished tables, so the
// workload emits transactional logical messages, which pgoutput sends as
// Begin/Message/Commit with no event for walpost: each is a transaction
// behind the unacknowledged one (INV-6). walpost must read all of them
// with its RSS flat, not confirm past the event (INV-1), and once Kafka is
// back deliver it and confirm past the whole flood.
func TestEmptyTransactionsDuringKafkaOutage(t *testing.T) {
	f := stackFixture(t, 1)
	p := f.start("WALPOST_POSTGRES_STATUS_INTERVAL=1s")
	waitStreaming(t, p)
	ctx := context.Background()

	// One event delivered first: walpost has the topic's metadata (it
	// reads max.message.bytes once per session) before the outage.
	expected, err := f.writeTxn(ctx, "before", []string{"before-0"}, `{"data": "x"}`)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the first event to be confirmed", func() bool {
		lsn, _, _ := f.slotState()
		return lsn >= f.currentWAL()
	})
	stackCtl(t, "kafka-stop")
	outageStart := time.Now()
	inflight, err := f.writeTxn(ctx, "inflight", []string{"inflight-0"}, `{"data": "x"}`)
	if err != nil {
		t.Fatal(err)
	}
	expected = append(expected, inflight...)
	eventLSN := f.currentWAL()
	waitFor(t, 30*time.Second, "walpost to receive the outbox event", func() bool { return f.replicaWrite() >= eventLSN })
	time.Sleep(2 * time.Second) // let startup and the first produce attempts settle
	base := rssKB(p.cmd.Process.Pid)

	peak, stopSampling := watchRSS(t, p)

	// One connection, so the SET applies to the DO; each COMMIT in the loop
	// ends one transaction (outside a transaction block, DO may commit).
	conn, err := f.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := conn.Exec(ctx, `SET synchronous_commit = off`); err != nil {
		t.Fatal(err)
	}
	// The flood: on PostgreSQL 14, which sends every write transaction of
	// the database as an empty Begin/Commit, a busy unrelated table; on 15
	// and later, which skip those, transactional logical messages (Begin,
	// Message, Commit: no outbox event either).
	var version int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	flood := fmt.Sprintf(`DO $$ BEGIN FOR i IN 1..%d LOOP PERFORM pg_logical_emit_message(true, 'walpost-test', 'x'); COMMIT; END LOOP; END $$`, emptyTxnFlood)
	if version < 150000 {
		busy := "busy_" + randName("t")
		if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (n int)`, busy)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = f.Pool.Exec(context.Background(), fmt.Sprintf(`DROP TABLE IF EXISTS %s`, busy)) })
		flood = fmt.Sprintf(`DO $$ BEGIN FOR i IN 1..%d LOOP INSERT INTO %s VALUES (i); COMMIT; END LOOP; END $$`, emptyTxnFlood, busy)
		t.Logf("PostgreSQL %d: the flood is %d single-row transactions on the unrelated table %s", version, emptyTxnFlood, busy)
	}
	_, err = conn.Exec(ctx, flood)
	conn.Release()
	if err != nil {
		t.Fatal(err)
	}
	floodEnd := f.currentWAL()
	t.Logf("flood: %d transactions in %s, WAL %s → %s", emptyTxnFlood, time.Since(start).Round(time.Millisecond), eventLSN, floodEnd)
	waitFor(t, 90*time.Second, "walpost to read the whole flood", func() bool { return f.replicaWrite() >= floodEnd })
	t.Logf("walpost read the flood %s after it started", time.Since(start).Round(time.Millisecond))
	alive(t, p, "after the flood")
	// Kafka stays down until walpost, idle behind the unacknowledged
	// event, sent emptyTxnIdleUpdates status updates after reading the
	// flood (keepalives, the heartbeat: it keeps reading).
	readAt := time.Now()
	replies := map[time.Time]bool{}
	waitFor(t, time.Minute, fmt.Sprintf("%d status updates with the stream idle behind the event", emptyTxnIdleUpdates), func() bool {
		alive(t, p, "while idle behind the event")
		var reply *time.Time
		_ = f.Pool.QueryRow(ctx, `SELECT r.reply_time FROM pg_stat_replication r JOIN pg_replication_slots s ON s.active_pid = r.pid WHERE s.slot_name = $1`, f.Slot).Scan(&reply)
		if reply != nil && reply.After(readAt) {
			replies[*reply] = true
		}
		return len(replies) >= emptyTxnIdleUpdates
	})
	alive(t, p, "at the end of the outage")
	stopSampling()
	outage := time.Since(outageStart)
	growth := peak() - int64(base)
	t.Logf("walpost RSS: %d KiB before the flood, peak %d KiB during the %s outage (growth %d KiB, bound %d KiB)", base, peak(), outage.Round(time.Second), growth, emptyTxnGrowthKiB)
	if base == 0 || growth > emptyTxnGrowthKiB {
		t.Errorf("walpost RSS grew by %d KiB reading %d empty transactions behind an unacknowledged event during a %s Kafka outage, want ≤ %d KiB", growth, emptyTxnFlood, outage.Round(time.Second), emptyTxnGrowthKiB)
	}
	// INV-1: nothing is confirmed past the unacknowledged event.
	if lsn, _, ok := f.slotState(); !ok || lsn >= eventLSN {
		t.Errorf("slot confirmed at %s with the event below %s unacknowledged", lsn, eventLSN)
	}

	stackCtl(t, "kafka-start")
	verifyDelivery(t, f, expected, 2*time.Minute)
	waitFor(t, time.Minute, "the slot to confirm past the flood", func() bool {
		lsn, _, _ := f.slotState()
		return lsn >= floodEnd
	})
	alive(t, p, "after Kafka came back")
}

// replicaWrite returns the write position walpost last reported for the
// fixture's slot (what it has received), 0 without a walsender.
func (f *fixture) replicaWrite() pglogrepl.LSN {
	var s *string
	_ = f.Pool.QueryRow(context.Background(), `SELECT r.write_lsn::text FROM pg_stat_replication r JOIN pg_replication_slots s ON s.active_pid = r.pid WHERE s.slot_name = $1`, f.Slot).Scan(&s)
	if s == nil {
		return 0
	}
	l, _ := pglogrepl.ParseLSN(*s)
	return l
}
