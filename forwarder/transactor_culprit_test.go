package forwarder

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/sink/kafka"
)

// A broker refusal inside a Kafka transaction, against kfake with a real
// transactional kafka.Sink: franz-go fails every buffered record of the
// partition with the refused batch's error (recBuf.failAllRecords), so
// the first failed ack is not the culprit's.

const (
	culpritTopic   = "events"
	culpritCPTopic = "walpost_checkpoints"
	culpritCommit  = pglogrepl.LSN(0x200) // the PostgreSQL transaction's commit LSN
	culpritEnd     = pglogrepl.LSN(0x280) // and its end
)

// culpritEnv is one kfake cluster whose broker answers INVALID_RECORD to
// every produce batch of culpritTopic that carries the record keyed
// culprit, the refusals and the quarantine its sessions share (as the
// Forwarder keeps them across sessions), and the PostgreSQL transaction
// every session reads again from the checkpoint.
type culpritEnv struct {
	t       *testing.T
	c       *kfake.Cluster
	keys    []string
	refused *refusals
	q       *listQuarantine
}

func newCulpritEnv(t *testing.T, keys ...string) *culpritEnv {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, culpritTopic, culpritCPTopic))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: culpritTopic, Err: kerr.InvalidRecord, Count: -1,
		When: func(req kmsg.Request) bool { return carriesKey(req.(*kmsg.ProduceRequest), "culprit") }})
	return &culpritEnv{t: t, c: c, keys: keys, refused: &refusals{}, q: &listQuarantine{}}
}

// carriesKey says whether req holds a record keyed key (in any topic:
// the fault's Topic selects the partitions it answers; produce v13 names
// topics by ID only).
func carriesKey(req *kmsg.ProduceRequest, key string) bool {
	for _, r := range producedRecords(req) {
		if string(r.Key) == key {
			return true
		}
	}
	return false
}

// producedRecords is every record of a produce request (batches that do
// not decode are skipped).
func producedRecords(req *kmsg.ProduceRequest) []kmsg.Record {
	var out []kmsg.Record
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			var batch kmsg.RecordBatch
			if err := batch.ReadFrom(rp.Records); err != nil {
				continue
			}
			recs, err := kfake.BatchRecords(batch)
			if err != nil {
				continue
			}
			out = append(out, recs...)
		}
	}
	return out
}

func culpritEvent(key string) *outbox.Event {
	return &outbox.Event{ID: key, IdempotencyKey: key, Payload: []byte(`{}`), CreatedAt: "2026-12-01 10:00:00.123456+00",
		CommitLSN: culpritCommit, CommitTime: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
}

// session runs one session as session.run does in exactly-once
// mode: a new transactional producer (fencing the last one), the
// checkpoint read after it, the events it does not cover emitted (the
// skipper's job), the transaction's end noted, and what is open committed
// when the session stops. It returns the error that ended the session.
func (e *culpritEnv) session() error {
	t := e.t
	t.Helper()
	id := kafka.TransactionalID("s", 7)
	k, err := kafka.New(kafka.Config{Brokers: e.c.ListenAddrs(), DefaultTopic: culpritTopic, Compression: "none",
		Linger: 50 * time.Millisecond, TransactionalID: id, TransactionTimeout: 10 * time.Second, CheckpointTopic: culpritCPTopic})
	if err != nil {
		t.Fatalf("kafka.New: %v", err)
	}
	defer k.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := k.InitProducer(ctx); err != nil {
		t.Fatalf("init producer: %v", err)
	}
	resume := kafka.TxnMark{LSN: 0x100}
	if cp, found := e.checkpoint(ctx); found {
		resume = cp
	}
	skip := 0
	switch {
	case resume.LSN >= culpritEnd:
		skip = len(e.keys)
	case resume.PartialCommitLSN == culpritCommit:
		skip = resume.Ordinal
	}
	tr := &countTracker{}
	x := newTransactor(transactorConfig{Slot: "s", Identity: position.Identity{SystemID: 7, Timeline: 1},
		Interval: time.Hour, Records: 100, Timeout: 10 * time.Second, MaxAttempts: 2, Resume: resume, DefaultTopic: culpritTopic},
		k, tr, e.refused, newIsolator(isolatorConfig{MaxAttempts: 2, DefaultTopic: culpritTopic, RateWindow: time.Hour}, nil, e.q, tr))
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- x.Run(rctx) }()
	for _, key := range e.keys[skip:] {
		x.Emit(culpritEvent(key), checkpoint.Ticket{})
	}
	x.Commit(culpritEnd)
	stop()
	return <-done
}

// checkpoint reads the slot's last committed checkpoint.
func (e *culpritEnv) checkpoint(ctx context.Context) (kafka.TxnMark, bool) {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.c.ListenAddrs()...))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	cp, found, err := kafka.ReadCheckpoint(ctx, cl, culpritCPTopic, kafka.TransactionalID("s", 7))
	if err != nil {
		e.t.Fatalf("read the checkpoint: %v", err)
	}
	return cp, found
}

// committed returns the keys of culpritTopic's records a read_committed
// consumer sees, read up to the partition's last stable offset (raw
// fetches, as kafka.ReadCheckpoint reads, so the end is known).
func (e *culpritEnv) committed() []string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.c.ListenAddrs()...))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	tds, err := kadm.NewClient(cl).ListTopics(ctx, culpritTopic)
	if err != nil {
		e.t.Fatal(err)
	}
	var keys []string
	for offset, end := int64(0), int64(-1); end < 0 || offset < end; {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID, req.MaxWaitMillis, req.MaxBytes, req.IsolationLevel = -1, 100, 1<<20, 1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = culpritTopic, tds[culpritTopic].ID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = offset, 1<<20, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			e.t.Fatalf("fetch %s at %d: %v", culpritTopic, offset, err)
		}
		part := &resp.Topics[0].Partitions[0]
		if end < 0 {
			end = part.LastStableOffset
		}
		fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: offset, IsolationLevel: kgo.ReadCommitted(),
			Topic: culpritTopic}, part, kgo.DefaultDecompressor(), nil)
		if fp.Err != nil {
			e.t.Fatalf("fetch %s at %d: %v", culpritTopic, offset, fp.Err)
		}
		for _, r := range fp.Records {
			keys = append(keys, string(r.Key))
		}
		if next <= offset && ctx.Err() != nil {
			e.t.Fatalf("no progress at offset %d of %s (last stable offset %d)", offset, culpritTopic, end)
		}
		offset = max(offset, next)
	}
	return keys
}

// TestTransactorBlamesOnlyTheCulprit (review 2026-12, finding 2): four
// events innocent-0, innocent-1, culprit, innocent-3 of one PostgreSQL
// transaction go to one partition, batched (linger), inside Kafka
// transactions; the broker refuses every batch that carries culprit, and
// franz-go fails the whole batch with INVALID_RECORD. Sessions run one
// after the other, sharing the refusals and the quarantine, with
// poison.max_attempts 2, until one ends cleanly. No innocent event ever
// has a refusal counted (only a record that failed alone does), only
// culprit is quarantined (after 2 attempts), and a read_committed
// consumer sees the three innocent events once each, in order.
func TestTransactorBlamesOnlyTheCulprit(t *testing.T) {
	innocent := []string{"innocent-0", "innocent-1", "innocent-3"}
	e := newCulpritEnv(t, "innocent-0", "innocent-1", "culprit", "innocent-3")
	const maxSessions = 6
	blamed := map[string]bool{}
	for n := 1; ; n++ {
		if n > maxSessions {
			t.Fatalf("no session ended cleanly after %d; quarantined %v", maxSessions, poisonKeys(e.q))
		}
		err := e.session()
		t.Logf("session %d: %v", n, err)
		for _, key := range innocent {
			if r := e.refused.get(eventKey{key, culpritCommit}); r.n > 0 && !blamed[key] {
				blamed[key] = true
				t.Errorf("session %d counted a refusal for %s (attempt %d), which the broker never refused alone", n, key, r.n)
			}
		}
		if err == nil {
			break
		}
		if !errors.Is(err, kerr.InvalidRecord) {
			t.Fatalf("session %d ended with %v, want the broker's INVALID_RECORD", n, err)
		}
	}
	entries := e.q.Entries()
	if len(entries) != 1 || entries[0].Event.IdempotencyKey != "culprit" || entries[0].Attempts != 2 || entries[0].ErrorClass != "INVALID_RECORD" {
		t.Fatalf("quarantined %v (%+v), want culprit alone, after 2 attempts, INVALID_RECORD", poisonKeys(e.q), entries)
	}
	if got := e.committed(); !slices.Equal(got, innocent) {
		t.Fatalf("read_committed sees %v, want %v once each", got, innocent)
	}
	if cp, found := e.checkpoint(t.Context()); !found || cp.LSN != culpritEnd || cp.PartialCommitLSN != 0 {
		t.Fatalf("checkpoint %+v (found %v), want the transaction's end %s", cp, found, culpritEnd)
	}
}

func poisonKeys(q *listQuarantine) []string {
	var keys []string
	for _, e := range q.Entries() {
		keys = append(keys, e.Event.IdempotencyKey)
	}
	return keys
}
