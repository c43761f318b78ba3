package kafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

const cpTopic = "walpost_checkpoints"

func newTxnCluster(t *testing.T) *kfake.Cluster {
	return newCluster(t, kfake.SeedTopics(1, cpTopic))
}

func newTxnKafka(t *testing.T, c *kfake.Cluster, id string) *kafka.Sink {
	t.Helper()
	return newKafka(t, c, kafka.Config{TransactionalID: id, TransactionTimeout: 10 * time.Second, CheckpointTopic: cpTopic})
}

// produceTxn begins a transaction and produces n events keyed prefix-i,
// waiting for every ack; it returns the first failure.
func produceTxn(t *testing.T, k *kafka.Sink, prefix string, n int) error {
	t.Helper()
	if err := k.BeginTxn(); err != nil {
		return err
	}
	return produceTxnOpen(t, k, prefix, n)
}

// produceTxnOpen produces as produceTxn does into the open transaction.
func produceTxnOpen(t *testing.T, k *kafka.Sink, prefix string, n int) error {
	t.Helper()
	var mu sync.Mutex
	var first error
	for i := range n {
		ev := &outbox.Event{ID: fmt.Sprintf("%s-%d", prefix, i), IdempotencyKey: fmt.Sprintf("%s-%d", prefix, i),
			Payload: []byte(`{}`), CreatedAt: "2026-11-29 22:50:51.123456+00", CommitLSN: 0x100, CommitTime: time.Now()}
		k.Produce(ev, sink.AckFunc(func(_ sink.Result, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
		}))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := k.Flush(ctx); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	return first
}

// committedKeys reads topic with read_committed up to its last stable
// offset and returns the keys seen.
func committedKeys(t *testing.T, c *kfake.Cluster, topic string) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var keys []string
	// The marker records ("end", one per partition) committed last bound
	// the read: each partition's is reached only after its earlier
	// records, but the partitions come in any order.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ends := map[int32]bool{}
	for len(ends) < markerPartitions {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read_committed consumer reached the end marker of %d of %d partitions; saw %v", len(ends), markerPartitions, keys)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Key) == "end" {
				ends[r.Partition] = true
				return
			}
			keys = append(keys, string(r.Key))
		})
	}
	return keys
}

// markerPartitions is testTopic's partition count: endMarker writes to
// each.
const markerPartitions = 3

// endMarker commits a record "end" to each partition of testTopic in its own transaction
// of a separate producer, so a read_committed consumer knows where to stop.
func endMarker(t *testing.T, c *kfake.Cluster) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("marker"), kgo.DefaultProduceTopic(testTopic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for p := range markerPartitions {
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte("end"), Partition: int32(p)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
}

func readCP(t *testing.T, c *kfake.Cluster, slot string, systemID int64) (kafka.TxnMark, bool) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cp, found, err := kafka.ReadCheckpoint(ctx, cl, cpTopic, kafka.TransactionalID(slot, systemID))
	if err != nil {
		t.Fatalf("ReadCheckpoint: %v", err)
	}
	return cp, found
}

func ctx20(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestTxnCommitAndAbort: a committed transaction's records and checkpoint
// are visible to read_committed readers; an aborted one's are not, and the
// checkpoint stays the committed one.
func TestTxnCommitAndAbort(t *testing.T) {
	c := newTxnCluster(t)
	k := newTxnKafka(t, c, kafka.TransactionalID("s1", 7))
	if err := k.InitProducer(ctx20(t)); err != nil {
		t.Fatal(err)
	}
	if _, found := readCP(t, c, "s1", 7365432109876543210); found {
		t.Fatal("checkpoint found in an empty topic")
	}
	if err := produceTxn(t, k, "a", 5); err != nil {
		t.Fatal(err)
	}
	want := kafka.TxnMark{Slot: "s1", SystemID: 7365432109876543210, Timeline: 2, LSN: 0x16B3748, PartialCommitLSN: 0x16B4000, Ordinal: 3,
		PartialCommitTime: time.Date(2026, 12, 1, 10, 0, 0, 123456000, time.UTC), Anchored: true,
		AnchorCommitLSN: 0x16B3700, AnchorCommitTime: time.Date(2026, 12, 1, 9, 59, 59, 999999000, time.UTC)}
	if err := k.CommitTxn(ctx20(t), want); err != nil {
		t.Fatalf("CommitTxn: %v", err)
	}
	if err := produceTxn(t, k, "b", 5); err != nil {
		t.Fatal(err)
	}
	if err := k.AbortTxn(ctx20(t)); err != nil {
		t.Fatalf("AbortTxn: %v", err)
	}
	endMarker(t, c)
	got := committedKeys(t, c, testTopic)
	if len(got) != 5 || strings.Join(got, ",") != strings.Join(sortedKeys("a", 5, got), ",") {
		t.Fatalf("read_committed saw %v, want exactly a-0..a-4", got)
	}
	cp, found := readCP(t, c, "s1", 7365432109876543210)
	if !found || !cp.Equal(want) {
		t.Fatalf("checkpoint %+v (found %v), want %+v", cp, found, want)
	}
	if _, found := readCP(t, c, "s1", 7); found {
		t.Fatal("checkpoint of another system identifier found")
	}
}

// sortedKeys returns got when it holds exactly prefix-0..prefix-(n-1) in
// some order, else the wanted list (so the comparison fails).
func sortedKeys(prefix string, n int, got []string) []string {
	want := map[string]bool{}
	for i := range n {
		want[fmt.Sprintf("%s-%d", prefix, i)] = true
	}
	for _, g := range got {
		if !want[g] {
			return nil
		}
		delete(want, g)
	}
	if len(want) != 0 {
		return nil
	}
	return got
}

// commitCP commits a Kafka transaction of k that holds only the
// checkpoint cp.
func commitCP(t *testing.T, k *kafka.Sink, cp kafka.TxnMark) {
	t.Helper()
	if err := produceTxn(t, k, "none", 0); err != nil {
		t.Fatal(err)
	}
	if err := k.CommitTxn(ctx20(t), cp); err != nil {
		t.Fatalf("CommitTxn(%s): %v", cp.LSN, err)
	}
}

// txnClient is a bare transactional client of the transactional id id
// (another walpost, or an earlier instance of this one).
func txnClient(t *testing.T, c *kfake.Cluster, id string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID(id), kgo.TransactionTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// beginCP begins a transaction of cl and produces cp's record to the
// checkpoint topic, keyed as CommitTxn keys it; the transaction stays open.
func beginCP(t *testing.T, cl *kgo.Client, cp kafka.TxnMark) {
	t.Helper()
	value, err := cp.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	r := &kgo.Record{Topic: cpTopic, Key: []byte(kafka.TransactionalID(cp.Slot, cp.SystemID)), Value: value}
	if err := cl.ProduceSync(ctx20(t), r).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// wantCP fails unless the checkpoint read for slot s1 of system 7 has the
// LSN, PartialCommitLSN and Ordinal of want.
func wantCP(t *testing.T, c *kfake.Cluster, want kafka.TxnMark) {
	t.Helper()
	cp, found := readCP(t, c, "s1", 7)
	if !found || cp.LSN != want.LSN || cp.PartialCommitLSN != want.PartialCommitLSN || cp.Ordinal != want.Ordinal {
		t.Fatalf("checkpoint %+v (found %v), want lsn %s, partial_commit_lsn %s, ordinal %d", cp, found, want.LSN, want.PartialCommitLSN, want.Ordinal)
	}
}

// createTopic creates topic with one partition and cleanup.policy policy.
func createTopic(t *testing.T, c *kfake.Cluster, topic, policy string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, 1, 1
	rc := kmsg.NewCreateTopicsRequestTopicConfig()
	rc.Name, rc.Value = "cleanup.policy", &policy
	rt.Configs = append(rt.Configs, rc)
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 10000
	resp, err := req.RequestWith(ctx20(t), cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("create topic %q: %v", topic, err)
	}
}

// TestReadCheckpointPastOpenTransaction: another walpost's transaction left
// open on the shared checkpoint topic (its checkpoint produced, not yet
// committed) pins the partition's last stable offset; the checkpoint this
// slot committed after it is still the one read, and the open one is not.
func TestReadCheckpointPastOpenTransaction(t *testing.T) {
	c := newTxnCluster(t)
	s1 := newTxnKafka(t, c, kafka.TransactionalID("s1", 7))
	if err := s1.InitProducer(ctx20(t)); err != nil {
		t.Fatal(err)
	}
	commitCP(t, s1, kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: 0x100})
	beginCP(t, txnClient(t, c, kafka.TransactionalID("s2", 9)), kafka.TxnMark{Slot: "s2", SystemID: 9, Timeline: 1, LSN: 0x5000})
	commitCP(t, s1, kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: 0x200, PartialCommitLSN: 0x250, Ordinal: 7})
	wantCP(t, c, kafka.TxnMark{LSN: 0x200, PartialCommitLSN: 0x250, Ordinal: 7})
	if cp, found := readCP(t, c, "s2", 9); found {
		t.Fatalf("read %+v of a transaction still open", cp)
	}
}

// TestReadCheckpointAbortedOrOpen: a checkpoint of the slot's own key in an
// aborted transaction, or in one still open (an earlier producer of the
// transactional id, before InitProducer completes it), is never read.
func TestReadCheckpointAbortedOrOpen(t *testing.T) {
	c := newTxnCluster(t)
	id := kafka.TransactionalID("s1", 7)
	s1 := newTxnKafka(t, c, id)
	if err := s1.InitProducer(ctx20(t)); err != nil {
		t.Fatal(err)
	}
	commitCP(t, s1, kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: 0x100})
	earlier := txnClient(t, c, id)
	beginCP(t, earlier, kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: 0x800, PartialCommitLSN: 0x850, Ordinal: 3})
	if err := earlier.EndTransaction(ctx20(t), kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	wantCP(t, c, kafka.TxnMark{LSN: 0x100})
	beginCP(t, earlier, kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: 0x900})
	wantCP(t, c, kafka.TxnMark{LSN: 0x100})
	next := newTxnKafka(t, c, id)
	if err := next.InitProducer(ctx20(t)); err != nil { // aborts the open one
		t.Fatal(err)
	}
	wantCP(t, c, kafka.TxnMark{LSN: 0x100})
	commitCP(t, next, kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: 0x300})
	wantCP(t, c, kafka.TxnMark{LSN: 0x300})
}

// TestReadCheckpointCompacted: on a compacted checkpoint topic (superseded
// checkpoints and the markers of transactions without records left
// removed) whose log start offset moved past its first records, with
// another walpost's transaction open, the slot's last committed checkpoint
// is read.
func TestReadCheckpointCompacted(t *testing.T) {
	c := newCluster(t)
	createTopic(t, c, cpTopic, "compact")
	s1 := newTxnKafka(t, c, kafka.TransactionalID("s1", 7))
	if err := s1.InitProducer(ctx20(t)); err != nil {
		t.Fatal(err)
	}
	s2 := newTxnKafka(t, c, kafka.TransactionalID("s2", 9))
	if err := s2.InitProducer(ctx20(t)); err != nil {
		t.Fatal(err)
	}
	commitCP(t, s1, kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: 0x100})  // offsets 0, 1 (marker)
	commitCP(t, s2, kafka.TxnMark{Slot: "s2", SystemID: 9, Timeline: 1, LSN: 0x1000}) // 2, 3
	commitCP(t, s1, kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: 0x200})  // 4, 5
	beginCP(t, txnClient(t, c, kafka.TransactionalID("s3", 11)), kafka.TxnMark{Slot: "s3", SystemID: 11, Timeline: 1, LSN: 0x7000})
	commitCP(t, s1, kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: 0x300, PartialCommitLSN: 0x350, Ordinal: 2})
	c.Compact()
	del := kmsg.NewPtrDeleteRecordsRequest()
	dt := kmsg.NewDeleteRecordsRequestTopic()
	dt.Topic = cpTopic
	dp := kmsg.NewDeleteRecordsRequestTopicPartition()
	dp.Partition, dp.Offset = 0, 3
	dt.Partitions = append(dt.Partitions, dp)
	del.Topics = append(del.Topics, dt)
	del.TimeoutMillis = 10000
	resp, err := del.RequestWith(ctx20(t), s1.Client())
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("delete records below offset 3: %v", err)
	}
	wantCP(t, c, kafka.TxnMark{LSN: 0x300, PartialCommitLSN: 0x350, Ordinal: 2})
}

// TestFenced: only PRODUCER_FENCED (or ErrFenced) says another producer
// took the transactional id. INVALID_PRODUCER_EPOCH answers a produce
// also after the broker aborted a transaction open past its timeout.
func TestFenced(t *testing.T) {
	for _, tt := range []struct {
		err    error
		fenced bool
	}{
		{kafka.ErrFenced, true},
		{kerr.ProducerFenced, true},
		{fmt.Errorf("commit the kafka transaction: %w", kerr.ProducerFenced), true},
		{kerr.InvalidProducerEpoch, false},
		{fmt.Errorf("produce: %w", kerr.InvalidProducerEpoch), false},
		{kerr.UnknownServerError, false},
		{nil, false},
	} {
		if got := kafka.Fenced(tt.err); got != tt.fenced {
			t.Errorf("Fenced(%v) = %v, want %v", tt.err, got, tt.fenced)
		}
	}
}

// answerError makes the cluster answer the next request of key with code:
// on every partition of a produce or a fetch, on the topic of a metadata
// request naming the checkpoint topic (others pass), on the whole request
// for InitProducerID and EndTxn.
func answerError(c *kfake.Cluster, key kmsg.Key, code int16) { answerErrors(c, key, code, false) }

// answerErrorAlways is answerError for every later request of key.
func answerErrorAlways(c *kfake.Cluster, key kmsg.Key, code int16) { answerErrors(c, key, code, true) }

func answerErrors(c *kfake.Cluster, key kmsg.Key, code int16, always bool) {
	c.ControlKey(int16(key), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if always {
			c.KeepControl()
		}
		switch req := req.(type) {
		case *kmsg.InitProducerIDRequest:
			resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
			resp.ErrorCode = code
			return resp, nil, true
		case *kmsg.EndTxnRequest:
			resp := req.ResponseKind().(*kmsg.EndTxnResponse)
			resp.ErrorCode = code
			return resp, nil, true
		case *kmsg.ProduceRequest:
			resp := req.ResponseKind().(*kmsg.ProduceResponse)
			for _, rt := range req.Topics {
				st := kmsg.NewProduceResponseTopic()
				st.Topic, st.TopicID = rt.Topic, rt.TopicID
				for _, rp := range rt.Partitions {
					sp := kmsg.NewProduceResponseTopicPartition()
					sp.Partition, sp.ErrorCode = rp.Partition, code
					st.Partitions = append(st.Partitions, sp)
				}
				resp.Topics = append(resp.Topics, st)
			}
			return resp, nil, true
		case *kmsg.FetchRequest:
			resp := req.ResponseKind().(*kmsg.FetchResponse)
			for _, rt := range req.Topics {
				st := kmsg.NewFetchResponseTopic()
				st.Topic, st.TopicID = rt.Topic, rt.TopicID
				for _, rp := range rt.Partitions {
					sp := kmsg.NewFetchResponseTopicPartition()
					sp.Partition, sp.ErrorCode = rp.Partition, code
					sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
					st.Partitions = append(st.Partitions, sp)
				}
				resp.Topics = append(resp.Topics, st)
			}
			return resp, nil, true
		case *kmsg.ListOffsetsRequest:
			resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
			for _, rt := range req.Topics {
				st := kmsg.NewListOffsetsResponseTopic()
				st.Topic = rt.Topic
				for _, rp := range rt.Partitions {
					sp := kmsg.NewListOffsetsResponseTopicPartition()
					sp.Partition, sp.ErrorCode = rp.Partition, code
					st.Partitions = append(st.Partitions, sp)
				}
				resp.Topics = append(resp.Topics, st)
			}
			return resp, nil, true
		case *kmsg.MetadataRequest:
			for _, rt := range req.Topics {
				if rt.Topic != nil && *rt.Topic == cpTopic {
					resp := req.ResponseKind().(*kmsg.MetadataResponse)
					st := kmsg.NewMetadataResponseTopic()
					st.Topic, st.ErrorCode = kmsg.StringPtr(cpTopic), code
					resp.Topics = append(resp.Topics, st)
					return resp, nil, true
				}
			}
		}
		return nil, nil, false
	})
}

// TestTxnInvalidProducerEpoch: a produce answered INVALID_PRODUCER_EPOCH,
// as after the broker aborted a transaction open past its timeout, fails
// as transient (class INVALID_PRODUCER_EPOCH), not fenced, and neither does
// the abort after it say fenced; the next session's producer resumes from
// the checkpoint and commits.
func TestTxnInvalidProducerEpoch(t *testing.T) {
	c := newTxnCluster(t)
	id := kafka.TransactionalID("s1", 7)
	k := newTxnKafka(t, c, id)
	if err := k.InitProducer(ctx20(t)); err != nil {
		t.Fatal(err)
	}
	commitCP(t, k, kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: 0x100})
	answerError(c, kmsg.Produce, kerr.InvalidProducerEpoch.Code)
	err := produceTxn(t, k, "t", 1)
	if err == nil {
		t.Fatal("a produce answered INVALID_PRODUCER_EPOCH succeeded")
	}
	if kafka.Fenced(err) || errors.Is(err, kafka.ErrFenced) {
		t.Fatalf("INVALID_PRODUCER_EPOCH on a produce reported as fenced: %v", err)
	}
	if kind, class := sink.KindOf(err); kind != sink.Transient || class != "INVALID_PRODUCER_EPOCH" {
		t.Fatalf("KindOf(%v) = %s, %q; want transient, INVALID_PRODUCER_EPOCH", err, kind, class)
	}
	if err := k.AbortTxn(ctx20(t)); kafka.Fenced(err) {
		t.Fatalf("abort after INVALID_PRODUCER_EPOCH reported as fenced: %v", err)
	}
	next := newTxnKafka(t, c, id)
	if err := next.InitProducer(ctx20(t)); err != nil {
		t.Fatalf("the next session's producer: %v", err)
	}
	wantCP(t, c, kafka.TxnMark{LSN: 0x100})
	commitCP(t, next, kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: 0x200})
	wantCP(t, c, kafka.TxnMark{LSN: 0x200})
}

// TestTxnACLRefused: each authorization the exactly-once mode needs,
// refused, is a destination failure (walpost waits until it is fixed,
// never skips past it, never stops as fenced) whose message names the ACL
// to add.
func TestTxnACLRefused(t *testing.T) {
	id := kafka.TransactionalID("s1", 7)
	cp := kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: 0x100}
	initProducer := func(t *testing.T, c *kfake.Cluster, key kmsg.Key, code int16) error {
		k := newTxnKafka(t, c, id)
		answerError(c, key, code)
		return k.InitProducer(ctx20(t))
	}
	commit := func(t *testing.T, c *kfake.Cluster, key kmsg.Key, code int16) error {
		k := newTxnKafka(t, c, id)
		if err := k.InitProducer(ctx20(t)); err != nil {
			t.Fatal(err)
		}
		if err := produceTxn(t, k, "a", 1); err != nil {
			t.Fatal(err)
		}
		answerError(c, key, code)
		return k.CommitTxn(ctx20(t), cp)
	}
	read := func(t *testing.T, c *kfake.Cluster, key kmsg.Key, code int16) error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		answerError(c, key, code)
		_, _, err = kafka.ReadCheckpoint(ctx20(t), cl, cpTopic, id)
		return err
	}
	readACL := []string{"READ and DESCRIBE on topic walpost_checkpoints", "--operation Read --operation Describe --topic walpost_checkpoints", "kafka.checkpoint_topic"}
	txnACL := []string{"WRITE and DESCRIBE on TransactionalId walpost-s1-7", "--operation Write --operation Describe --transactional-id walpost-s1-7"}
	for _, tt := range []struct {
		name string
		run  func(*testing.T, *kfake.Cluster, kmsg.Key, int16) error
		key  kmsg.Key
		err  *kerr.Error
		want []string
	}{
		{"InitProducer: transactional id", initProducer, kmsg.InitProducerID, kerr.TransactionalIDAuthorizationFailed, txnACL},
		{"InitProducer: cluster", initProducer, kmsg.InitProducerID, kerr.ClusterAuthorizationFailed,
			[]string{"IDEMPOTENT_WRITE on the cluster", "--operation IdempotentWrite --cluster", "TransactionalId walpost-s1-7"}},
		{"CommitTxn: checkpoint produce", commit, kmsg.Produce, kerr.TopicAuthorizationFailed,
			[]string{"WRITE and DESCRIBE on topic walpost_checkpoints", "--operation Write --operation Describe --topic walpost_checkpoints", "kafka.checkpoint_topic"}},
		{"CommitTxn: checkpoint produce, transactional id", commit, kmsg.Produce, kerr.TransactionalIDAuthorizationFailed, txnACL},
		{"CommitTxn: EndTxn", commit, kmsg.EndTxn, kerr.TransactionalIDAuthorizationFailed, txnACL},
		{"ReadCheckpoint: fetch", read, kmsg.Fetch, kerr.TopicAuthorizationFailed, readACL},
		{"ReadCheckpoint: list offsets", read, kmsg.ListOffsets, kerr.TopicAuthorizationFailed, readACL},
		{"ReadCheckpoint: metadata", read, kmsg.Metadata, kerr.TopicAuthorizationFailed, readACL},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run(t, newTxnCluster(t), tt.key, tt.err.Code)
			if !errors.Is(err, tt.err) {
				t.Fatalf("error %v, want %s", err, tt.err.Message)
			}
			if kind, class := sink.KindOf(err); kind != sink.Destination || class != tt.err.Message {
				t.Errorf("KindOf(%v) = %s, %q; want destination, %q", err, kind, class, tt.err.Message)
			}
			if kafka.Fenced(err) {
				t.Errorf("%v reported as fenced", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q does not name %q", err, w)
				}
			}
		})
	}
}

// TestEnsureCheckpointTopicPolicy: the checkpoint topic's cleanup.policy
// must be exactly compact. With delete beside it, retention can remove an
// idle slot's only checkpoint; the error names the kafka-configs.sh fix.
func TestEnsureCheckpointTopicPolicy(t *testing.T) {
	c := newCluster(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i, tt := range []struct {
		policy string
		want   []string // substrings of the error; nil: accepted
	}{
		{"compact", nil},
		{"compact,delete", []string{"cleanup.policy=compact,delete", "exactly compact"}},
		{"delete,compact", []string{"cleanup.policy=delete,compact", "exactly compact"}},
		{"delete", []string{"is not compacted", "cleanup.policy=delete"}},
	} {
		topic := fmt.Sprintf("checkpoints_%d", i)
		createTopic(t, c, topic, tt.policy)
		created, err := kafka.EnsureCheckpointTopic(ctx20(t), cl, topic, true)
		if created {
			t.Errorf("cleanup.policy=%s: created an existing topic", tt.policy)
		}
		if tt.want == nil {
			if err != nil {
				t.Errorf("cleanup.policy=%s refused: %v", tt.policy, err)
			}
			continue
		}
		if !errors.Is(err, kafka.ErrCheckpointTopic) {
			t.Errorf("cleanup.policy=%s: %v, want ErrCheckpointTopic", tt.policy, err)
			continue
		}
		fix := "fix: kafka-configs.sh --alter --entity-type topics --entity-name " + topic + " --add-config cleanup.policy=compact"
		for _, w := range append(tt.want, fix) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("cleanup.policy=%s: message %q does not say %q", tt.policy, err, w)
			}
		}
	}
}

// TestTxnFenced: a second producer with the same transactional id fences
// the first: the first's next commit, or the abort after its refused
// produce, fails with ErrFenced and a message that says what happened,
// and nothing it produced after the fence is visible.
func TestTxnFenced(t *testing.T) {
	c := newTxnCluster(t)
	id := kafka.TransactionalID("s1", 7)
	a := newTxnKafka(t, c, id)
	if err := a.InitProducer(ctx20(t)); err != nil {
		t.Fatal(err)
	}
	if err := produceTxn(t, a, "a", 3); err != nil {
		t.Fatal(err)
	}
	if err := a.CommitTxn(ctx20(t), kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: 0x100}); err != nil {
		t.Fatal(err)
	}
	b := newTxnKafka(t, c, id)
	if err := b.InitProducer(ctx20(t)); err != nil {
		t.Fatalf("second producer: %v", err)
	}
	// A produce of the old epoch is refused with INVALID_PRODUCER_EPOCH,
	// which is not fencing by itself (a transaction the broker timed out
	// gets it too); the abort after it, or the commit, says PRODUCER_FENCED.
	err := produceTxn(t, a, "x", 3)
	if err == nil {
		err = a.CommitTxn(ctx20(t), kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: 0x200})
	} else if cerr := a.CommitTxn(ctx20(t), kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: 0x200}); cerr == nil {
		t.Fatalf("the fenced producer committed after its produce failed with %v", err)
	}
	if !errors.Is(err, kafka.ErrFenced) {
		t.Logf("before the abort: %v", err)
		err = a.AbortTxn(ctx20(t))
	}
	if !errors.Is(err, kafka.ErrFenced) {
		t.Fatalf("fenced producer's commit or abort: %v, want ErrFenced", err)
	}
	if !strings.Contains(err.Error(), "another walpost initialised the same transactional id") {
		t.Fatalf("message %q does not say what happened", err)
	}
	t.Logf("fenced: %v", err)
	if err := produceTxn(t, b, "b", 2); err != nil {
		t.Fatal(err)
	}
	if err := b.CommitTxn(ctx20(t), kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: 0x300}); err != nil {
		t.Fatalf("the new producer's commit: %v", err)
	}
	endMarker(t, c)
	got := committedKeys(t, c, testTopic)
	for _, k := range got {
		if strings.HasPrefix(k, "x-") {
			t.Fatalf("read_committed saw %s, produced by the fenced producer", k)
		}
	}
	if len(got) != 5 {
		t.Fatalf("read_committed saw %v, want a-0..2 and b-0..1", got)
	}
	if cp, _ := readCP(t, c, "s1", 7); cp.LSN != 0x300 {
		t.Fatalf("checkpoint %+v, want the new producer's 0/300", cp)
	}
}

// TestTxnUnknownOutcome: the broker answers the commit with
// UNKNOWN_SERVER_ERROR (outcome unknown): CommitTxn fails, AbortTxn
// settles it, the checkpoint read afterwards is the last committed one and
// a read_committed reader sees none of the transaction; the producer then
// commits again.
func TestTxnUnknownOutcome(t *testing.T) {
	c := newTxnCluster(t)
	k := newTxnKafka(t, c, kafka.TransactionalID("s1", 7))
	if err := k.InitProducer(ctx20(t)); err != nil {
		t.Fatal(err)
	}
	if err := produceTxn(t, k, "a", 2); err != nil {
		t.Fatal(err)
	}
	first := kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: 0x100, Anchored: true}
	if err := k.CommitTxn(ctx20(t), first); err != nil {
		t.Fatal(err)
	}
	if err := produceTxn(t, k, "u", 3); err != nil {
		t.Fatal(err)
	}
	c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		resp := req.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.UnknownServerError.Code
		return resp, nil, true
	})
	err := k.CommitTxn(ctx20(t), kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: 0x200})
	if err == nil {
		t.Fatal("commit answered UNKNOWN_SERVER_ERROR returned nil")
	}
	if kafka.Fenced(err) {
		t.Fatalf("unknown outcome reported as fenced: %v", err)
	}
	t.Logf("commit: %v", err)
	if err := k.AbortTxn(ctx20(t)); err != nil {
		t.Fatalf("AbortTxn after the unknown outcome: %v", err)
	}
	if cp, _ := readCP(t, c, "s1", 7); !cp.Equal(first) {
		t.Fatalf("checkpoint %+v after the unknown outcome, want the committed %+v", cp, first)
	}
	if err := produceTxn(t, k, "b", 2); err != nil {
		t.Fatal(err)
	}
	if err := k.CommitTxn(ctx20(t), kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: 0x300}); err != nil {
		t.Fatalf("commit after the abort: %v", err)
	}
	endMarker(t, c)
	got := committedKeys(t, c, testTopic)
	for _, key := range got {
		if strings.HasPrefix(key, "u-") {
			t.Fatalf("read_committed saw %s of the transaction whose commit was unknown, then aborted", key)
		}
	}
	if len(got) != 4 {
		t.Fatalf("read_committed saw %v, want a-0..1 and b-0..1", got)
	}
	if cp, _ := readCP(t, c, "s1", 7); cp.LSN != 0x300 {
		t.Fatalf("checkpoint %+v, want 0/300", cp)
	}
}

// TestCheckpointJSONAnchor: every checkpoint written carries its anchor
// (0/0 when it names no transaction), and one written without the field
// reads as not anchored.
func TestCheckpointJSONAnchor(t *testing.T) {
	b, err := json.Marshal(kafka.TxnMark{Slot: "s", SystemID: 1, Timeline: 1, LSN: 0x100})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"anchor_commit_lsn":"0/0"`) {
		t.Errorf("%s: want anchor_commit_lsn 0/0", b)
	}
	var cp kafka.TxnMark
	if err := json.Unmarshal(b, &cp); err != nil || !cp.Anchored || cp.AnchorCommitLSN != 0 {
		t.Errorf("read back %+v, %v: want anchored at 0/0", cp, err)
	}
	var legacy kafka.TxnMark
	if err := json.Unmarshal([]byte(`{"slot":"s","system_identifier":"1","timeline":1,"lsn":"0/100"}`), &legacy); err != nil || legacy.Anchored {
		t.Errorf("legacy checkpoint %+v, %v: want not anchored", legacy, err)
	}
	if err := json.Unmarshal([]byte(`{"slot":"s","system_identifier":"1","timeline":1,"lsn":"0/100","anchor_commit_lsn":"0/50","anchor_commit_time":"yesterday"}`), &legacy); err == nil {
		t.Error("a bad anchor_commit_time was accepted")
	}
}

// cpEnd is the end offset of the checkpoint topic's partition: its
// records, committed, aborted or open, and the transactions' markers.
func cpEnd(t *testing.T, c *kfake.Cluster) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx20(t), cpTopic)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := ends.Lookup(cpTopic, 0)
	if !ok || o.Err != nil {
		t.Fatalf("end offset of %s: %v (listed %v)", cpTopic, o.Err, ok)
	}
	return o.Offset
}

// TestTxnStagedCheckpoint: a checkpoint staged before the flush is the
// one CommitTxn commits, once (not produced again); a commit of another
// position than the staged one is refused; staged in a transaction that
// aborts, it is aborted with it and forgotten.
func TestTxnStagedCheckpoint(t *testing.T) {
	c := newTxnCluster(t)
	k := newTxnKafka(t, c, kafka.TransactionalID("s1", 7))
	if err := k.InitProducer(ctx20(t)); err != nil {
		t.Fatal(err)
	}
	mark := func(lsn uint64) kafka.TxnMark {
		return kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: pglogrepl.LSN(lsn), Anchored: true}
	}
	stage := func(cp kafka.TxnMark) {
		t.Helper()
		if err := k.StageCheckpoint(ctx20(t), cp); err != nil {
			t.Fatalf("StageCheckpoint(%s): %v", cp.LSN, err)
		}
	}

	// Staged, then the transaction's records, one flush, the commit.
	if err := k.BeginTxn(); err != nil {
		t.Fatal(err)
	}
	stage(mark(0x100))
	if err := produceTxnOpen(t, k, "a", 3); err != nil {
		t.Fatal(err)
	}
	if err := k.CommitTxn(ctx20(t), mark(0x100)); err != nil {
		t.Fatalf("CommitTxn: %v", err)
	}
	if end := cpEnd(t, c); end != 2 { // the checkpoint and the commit marker
		t.Fatalf("checkpoint partition ends at %d after one staged commit, want 2 (the staged record produced again?)", end)
	}
	wantCP(t, c, mark(0x100))

	// Staged at one position, committed at another: refused, and the
	// transaction aborts; the committed checkpoint stays.
	if err := produceTxn(t, k, "b", 2); err != nil {
		t.Fatal(err)
	}
	stage(mark(0x200))
	if err := k.CommitTxn(ctx20(t), mark(0x300)); err == nil || !strings.Contains(err.Error(), "staged in it names 0/200") {
		t.Fatalf("CommitTxn of 0/300 with 0/200 staged: %v, want the mismatch named", err)
	}
	if err := k.AbortTxn(ctx20(t)); err != nil {
		t.Fatalf("AbortTxn: %v", err)
	}
	wantCP(t, c, mark(0x100))

	// Staged in a transaction that aborts: the last committed one stays,
	// and the stage is forgotten: the next commit of that same position,
	// not staged, produces its own record (the checkpoint and the marker).
	if err := produceTxn(t, k, "c", 2); err != nil {
		t.Fatal(err)
	}
	stage(mark(0x400))
	if err := k.Flush(ctx20(t)); err != nil {
		t.Fatal(err)
	}
	if err := k.AbortTxn(ctx20(t)); err != nil {
		t.Fatalf("AbortTxn: %v", err)
	}
	wantCP(t, c, mark(0x100))
	before := cpEnd(t, c)
	commitCP(t, k, mark(0x400))
	if end := cpEnd(t, c); end != before+2 {
		t.Fatalf("checkpoint partition ends at %d after a commit from %d, want %d (the aborted stage reused?)", end, before, before+2)
	}
	wantCP(t, c, mark(0x400))
}

// TestTxnStagedRefusal: a flush that fails the transaction's records and
// its staged checkpoint for an ACL reports, through StagedRefusal, the
// checkpoint topic's fix; nothing is reported while the checkpoint has no
// outcome or was acknowledged, and the outcome stays for CommitTxn.
func TestTxnStagedRefusal(t *testing.T) {
	cp := kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: 0x100}
	c := newTxnCluster(t)
	k := newTxnKafka(t, c, kafka.TransactionalID("s1", 7))
	if err := k.InitProducer(ctx20(t)); err != nil {
		t.Fatal(err)
	}
	if err := k.StagedRefusal(); err != nil {
		t.Fatalf("StagedRefusal with nothing staged: %v", err)
	}
	// Acknowledged: none.
	if err := k.BeginTxn(); err != nil {
		t.Fatal(err)
	}
	if err := k.StageCheckpoint(ctx20(t), cp); err != nil {
		t.Fatal(err)
	}
	if err := produceTxnOpen(t, k, "a", 1); err != nil {
		t.Fatal(err)
	}
	if err := k.StagedRefusal(); err != nil {
		t.Fatalf("StagedRefusal of an acknowledged checkpoint: %v", err)
	}
	if err := k.CommitTxn(ctx20(t), cp); err != nil {
		t.Fatalf("CommitTxn after StagedRefusal: %v", err)
	}
	// Refused with the records: every Produce is answered with the
	// refusal (the staged checkpoint may go in a request before the
	// record's; answering the first request only would refuse one of them).
	answerErrorAlways(c, kmsg.Produce, kerr.TopicAuthorizationFailed.Code)
	if err := k.BeginTxn(); err != nil {
		t.Fatal(err)
	}
	if err := k.StageCheckpoint(ctx20(t), kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: 0x200}); err != nil {
		t.Fatal(err)
	}
	if err := produceTxnOpen(t, k, "b", 1); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("the record's outcome: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	err := k.StagedRefusal()
	if !errors.Is(err, kerr.TopicAuthorizationFailed) || !strings.Contains(err.Error(), "WRITE and DESCRIBE on topic walpost_checkpoints") {
		t.Fatalf("StagedRefusal: %v, want the checkpoint topic's ACL fix", err)
	}
	if err2 := k.StagedRefusal(); err2 == nil {
		t.Fatal("the second StagedRefusal found no outcome: the first consumed it")
	}
}
