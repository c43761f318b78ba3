package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/kafkaconf"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/sink/kafka"
)

// TestRecoverExactlyOnceRefused: in exactly-once mode recover re-sends rows
// that may already be in committed Kafka transactions, so it refuses to
// run, before it connects to anything, unless the operator passes
// --allow-duplicates; the message names the flag and why. A dry run
// produces nothing and is not refused, nor is at-least-once mode.
func TestRecoverExactlyOnceRefused(t *testing.T) {
	tests := []struct {
		name    string
		mode    string
		opts    Options
		refused bool
	}{
		{"exactly-once", config.ExactlyOnce, Options{}, true},
		{"exactly-once --since", config.ExactlyOnce, Options{Since: time.Now().Add(-time.Hour)}, true},
		{"exactly-once --allow-other-system", config.ExactlyOnce, Options{AllowOtherSystem: true}, true},
		{"exactly-once --dry-run", config.ExactlyOnce, Options{DryRun: true}, false},
		{"exactly-once --allow-duplicates", config.ExactlyOnce, Options{AllowDuplicates: true}, false},
		{"at-least-once", config.AtLeastOnce, Options{}, false},
	}
	for _, tt := range tests {
		cfg := config.Default()
		cfg.Delivery.Mode = tt.mode
		// Nothing listens here: a run past the refusal fails to connect.
		cfg.Postgres.URL = "postgres://walpost@127.0.0.1:1/walpost?connect_timeout=2"
		_, err := (&Recoverer{Config: cfg}).Run(t.Context(), tt.opts)
		if err == nil {
			t.Fatalf("%s: Run succeeded without a database", tt.name)
		}
		if got := errors.Is(err, ErrRefused); got != tt.refused {
			t.Errorf("%s: refused = %v (%v), want %v", tt.name, got, err, tt.refused)
			continue
		}
		if !tt.refused {
			continue
		}
		for _, want := range []string{"exactly-once", "--allow-duplicates", "read_committed", "twice", "idempotency_key"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: refusal %q does not name %q", tt.name, err, want)
			}
		}
	}
}

const (
	txnTopic   = "outbox"
	txnCPTopic = "walpost_checkpoints"
	txnSlot    = "walpost"
)

var txnID = position.Identity{SystemID: 7714451963208112402, Timeline: 1}

// txnConfig is an exactly-once configuration on a kfake cluster with the
// topic and the (compacted) checkpoint topic.
func txnConfig(t *testing.T) *config.Config {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, txnTopic))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	compact := "compact"
	if _, err := kadm.NewClient(cl).CreateTopic(t.Context(), 1, 1, map[string]*string{"cleanup.policy": &compact}, txnCPTopic); err != nil {
		t.Fatalf("create the checkpoint topic: %v", err)
	}
	cfg := config.Default()
	cfg.Delivery.Mode = config.ExactlyOnce
	cfg.Delivery.TransactionTimeout = 10 * time.Second
	cfg.Postgres.Slot = txnSlot
	cfg.Kafka.Brokers = c.ListenAddrs()
	cfg.Kafka.Topic = txnTopic
	cfg.Kafka.CheckpointTopic = txnCPTopic
	return cfg
}

// txnRun is what walpost run committed before the slot was lost (or
// before PostgreSQL was restored to an earlier point): a transaction with
// the checkpoint at lsn.
func txnRun(t *testing.T, cfg *config.Config, lsn pglogrepl.LSN) {
	t.Helper()
	k, err := openTxn(t.Context(), cfg, txnID, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("open the transactional producer: %v", err)
	}
	defer k.Close()
	if err := k.BeginTxn(); err != nil {
		t.Fatal(err)
	}
	if err := k.CommitTxn(t.Context(), checkpointAt(txnSlot, txnID, lsn)); err != nil {
		t.Fatalf("commit the checkpoint at %s: %v", lsn, err)
	}
}

// txnEvent is the recovered event i, with a payload of size bytes.
func txnEvent(i, size int) *outbox.Event {
	return &outbox.Event{ID: fmt.Sprint(i), IdempotencyKey: fmt.Sprintf("gap-%d", i), Payload: []byte(`{"x": "` + strings.Repeat("x", size) + `"}`),
		CreatedAt: "2026-12-01 10:00:00.123456+00", CommitLSN: 0x1000, CommitTime: time.Now(), Recovered: true}
}

// txnCheckpoint reads the slot's checkpoint as walpost run does.
func txnCheckpoint(t *testing.T, cfg *config.Config) kafka.TxnMark {
	t.Helper()
	cl, err := kafkaconf.NewClient(cfg.Kafka)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cp, found, err := kafka.ReadCheckpoint(ctx, cl, txnCPTopic, kafka.TransactionalID(txnSlot, txnID.SystemID))
	if err != nil || !found {
		t.Fatalf("read the checkpoint: found %v, %v", found, err)
	}
	return cp
}

// txnCommittedKeys reads the topic with read_committed up to its end, and
// returns the keys. The end is a record produced without a transaction to
// every partition after the test's transactions ended: a read_committed
// reader gets it only once the last stable offset passed every record
// before it, so seeing it in each partition means nothing committed is
// still to come (a reader that stopped on quiet polls could stop before
// the first fetch answered).
func txnCommittedKeys(t *testing.T, cfg *config.Config) []string {
	t.Helper()
	const end = "\x00end"
	w, err := kgo.NewClient(kgo.SeedBrokers(cfg.Kafka.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var rs []*kgo.Record
	for p := range int32(3) {
		rs = append(rs, &kgo.Record{Topic: txnTopic, Partition: p, Key: []byte(end)})
	}
	if err := w.ProduceSync(t.Context(), rs...).FirstErr(); err != nil {
		t.Fatalf("produce the end records: %v", err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Kafka.Brokers...), kgo.ConsumeTopics(txnTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var keys []string
	ends := map[int32]bool{}
	for len(ends) < len(rs) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read_committed saw the end of %d of %d partitions in 30 s (keys so far %v)", len(ends), len(rs), keys)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Key) == end {
				ends[r.Partition] = true
				return
			}
			keys = append(keys, string(r.Key))
		})
	}
	return keys
}

// TestRecoverTxnCheckpoint: in exactly-once mode the gap is produced in
// Kafka transactions of at most delivery.transaction_records records (3
// here), and the last one commits the slot's checkpoint at the new
// position, below the one walpost run had committed (0/9000): the
// checkpoint walpost run reads next is the recovered position, not the
// older, higher one. A read_committed consumer sees every record of the
// gap once.
func TestRecoverTxnCheckpoint(t *testing.T) {
	for _, tt := range []struct{ events, txns int }{{7, 3}, {6, 2}, {0, 1}} {
		t.Run(fmt.Sprintf("%d events", tt.events), func(t *testing.T) {
			t.Parallel()
			cfg := txnConfig(t)
			txnRun(t, cfg, 0x9000)
			ctx := t.Context()
			k, err := openTxn(ctx, cfg, txnID, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatalf("open the transactional producer: %v", err)
			}
			defer k.Close()
			p := &producer{sink: k, max: 2}
			p.init()
			s := newTxnSender(p, k, 3, txnSlot, txnID)
			for i := range tt.events {
				if err := s.produce(ctx, txnEvent(i, 10)); err != nil {
					t.Fatalf("produce event %d: %v", i, err)
				}
			}
			if err := s.finish(ctx, checkpointAt(txnSlot, txnID, 0x1000)); err != nil {
				t.Fatalf("finish: %v", err)
			}
			if s.txns != tt.txns || p.acked != tt.events {
				t.Errorf("%d transactions, %d records acknowledged; want %d and %d", s.txns, p.acked, tt.txns, tt.events)
			}
			cp := txnCheckpoint(t, cfg)
			if cp.Slot != txnSlot || cp.SystemID != txnID.SystemID || cp.Timeline != txnID.Timeline || cp.LSN != 0x1000 || cp.PartialCommitLSN != 0 || cp.Ordinal != 0 {
				t.Errorf("checkpoint after recover = %+v; want slot %s, system %d, timeline %d, LSN 0/1000, no partial transaction",
					cp, txnSlot, txnID.SystemID, txnID.Timeline)
			}
			keys := txnCommittedKeys(t, cfg)
			seen := map[string]int{}
			for _, k := range keys {
				seen[k]++
			}
			for i := range tt.events {
				if n := seen[fmt.Sprintf("gap-%d", i)]; n != 1 {
					t.Errorf("read_committed sees gap-%d %d times, want once (all: %v)", i, n, keys)
				}
			}
			if len(keys) != tt.events {
				t.Errorf("read_committed sees %d records, want %d", len(keys), tt.events)
			}
		})
	}
}

// TestRecoverTxnFailure: a record Kafka refuses fails the recovery; its
// transaction is aborted, so read_committed never sees that transaction's
// records, and the checkpoint is not set to the new position (the row
// stays marked and the next recover starts over).
func TestRecoverTxnFailure(t *testing.T) {
	t.Parallel()
	cfg := txnConfig(t)
	cfg.Kafka.MaxMessageBytes = 4096
	txnRun(t, cfg, 0x9000)
	ctx := t.Context()
	k, err := openTxn(ctx, cfg, txnID, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("open the transactional producer: %v", err)
	}
	defer k.Close()
	p := &producer{sink: k, max: 2}
	p.init()
	s := newTxnSender(p, k, 3, txnSlot, txnID)
	var failed error
	for i := range 7 {
		size := 10
		if i == 5 {
			size = 10000 // above kafka.max_message_bytes, the last of the second transaction
		}
		if failed = s.produce(ctx, txnEvent(i, size)); failed != nil {
			break
		}
	}
	if failed == nil {
		failed = s.finish(ctx, checkpointAt(txnSlot, txnID, 0x1000))
	}
	if failed == nil || !strings.Contains(failed.Error(), "gap-5") {
		t.Fatalf("recovery with a record too large: %v, want a failure naming gap-5", failed)
	}
	s.abort(ctx, 10*time.Second, slog.New(slog.DiscardHandler))
	if cp := txnCheckpoint(t, cfg); cp.LSN == 0x1000 {
		t.Errorf("checkpoint at the new position %s after a failed recovery", cp.LSN)
	}
	keys := txnCommittedKeys(t, cfg)
	if got := strings.Join(keys, ","); len(keys) != 3 || strings.Contains(got, "gap-3") || strings.Contains(got, "gap-4") {
		t.Errorf("read_committed sees %v; want the first transaction's gap-0..2 only", keys)
	}
}
