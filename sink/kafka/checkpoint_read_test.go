package kafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walpost/walpost/sink/kafka"
)

// twoCheckpoints commits two transactions of slot "s1" (system 7) with the
// checkpoints at LSN 0x100 and 0x200: the checkpoint partition holds
// record, marker, record, marker at offsets 0 to 3.
func twoCheckpoints(t *testing.T, c *kfake.Cluster) (id string, first, second kafka.TxnMark) {
	t.Helper()
	id = kafka.TransactionalID("s1", 7)
	k := newTxnKafka(t, c, id)
	if err := k.InitProducer(ctx20(t)); err != nil {
		t.Fatal(err)
	}
	first = kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: 0x100}
	second = kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: 0x200}
	for i, cp := range []kafka.TxnMark{first, second} {
		if err := produceTxn(t, k, "e"+string(rune('a'+i)), 1); err != nil {
			t.Fatal(err)
		}
		if err := k.CommitTxn(ctx20(t), cp); err != nil {
			t.Fatal(err)
		}
	}
	return id, first, second
}

func newReader(t *testing.T, c *kfake.Cluster) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// TestReadCheckpointStaleFetch: a fetch answered with a high watermark
// behind the leader's (a follower the metadata named as leader, or a
// leader just elected, before its followers fetched again) must not end
// the read before the newest checkpoint: the end is the leader's
// ListOffsets answer, and the read fetches until it reaches it.
func TestReadCheckpointStaleFetch(t *testing.T) {
	c := newTxnCluster(t)
	id, _, second := twoCheckpoints(t, c)
	var fetches, stale atomic.Int32
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		freq := req.(*kmsg.FetchRequest)
		c.KeepControl()
		if fetches.Add(1) > 3 {
			return nil, nil, false
		}
		stale.Add(1)
		// An answer of a replica whose high watermark is at the second
		// record: it has nothing to give from offset 0 past the first
		// checkpoint's marker.
		resp := freq.ResponseKind().(*kmsg.FetchResponse)
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = freq.Topics[0].Topic, freq.Topics[0].TopicID
		rp := kmsg.NewFetchResponseTopicPartition()
		rp.Partition, rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = 0, 2, 2, 0
		rt.Partitions = append(rt.Partitions, rp)
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})
	cp, found, rd, err := kafka.ReadCheckpointFrom(ctx20(t), newReader(t, c), cpTopic, id, true)
	if err != nil || !found {
		t.Fatalf("ReadCheckpointFrom: found %v, err %v", found, err)
	}
	if cp.LSN != second.LSN {
		t.Fatalf("checkpoint at %s, want the newest, %s (a stale fetch answer ended the read): %+v", cp.LSN, second.LSN, rd)
	}
	// The stale answers were all given, and the read went on past them.
	if rd.HighWatermark != 4 || rd.Offset != 2 || stale.Load() != 3 || fetches.Load() < 4 {
		t.Fatalf("read %+v after %d fetches, %d answered stale; want high watermark 4, offset 2, 3 stale answers and a fetch after them", rd, fetches.Load(), stale.Load())
	}
}

// TestReadCheckpointAwaitsMarker: a checkpoint record of the key with no
// marker yet (its transaction is completing) is waited for with await, so
// the read returns what that transaction decides; without await it is
// left out, as before.
func TestReadCheckpointAwaitsMarker(t *testing.T) {
	c := newTxnCluster(t)
	id, _, _ := twoCheckpoints(t, c)
	// A third checkpoint, its transaction left open for now.
	third := kafka.TxnMark{Slot: "s1", SystemID: 7, Timeline: 1, LSN: 0x300}
	other, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("other"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	value, _ := json.Marshal(third)
	if err := other.ProduceSync(ctx20(t), &kgo.Record{Topic: cpTopic, Key: []byte(id), Value: value}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cp, _, rd, err := kafka.ReadCheckpointFrom(ctx20(t), newReader(t, c), cpTopic, id, false)
	if err != nil || cp.LSN != 0x200 || len(rd.Unmarked) != 1 || rd.Unmarked[0] != 4 {
		t.Fatalf("without await: %s, %+v, %v; want 0/200 with offset 4 unmarked", cp.LSN, rd, err)
	}
	// With await, for a bounded time: an error naming the record.
	short, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	_, _, _, err = kafka.ReadCheckpointFrom(short, newReader(t, c), cpTopic, id, true)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("await with the marker missing: err %v, want a deadline error", err)
	}
	for _, want := range []string{"offsets [4]", "no transaction marker", "describe-producers", "KAFKA-20734", "Hanging Kafka transaction"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = other.EndTransaction(context.Background(), kgo.TryCommit)
	}()
	cp, _, rd, err = kafka.ReadCheckpointFrom(ctx20(t), newReader(t, c), cpTopic, id, true)
	if err != nil || cp.LSN != third.LSN || rd.Reads < 2 || len(rd.Unmarked) != 0 {
		t.Fatalf("await: %s, %+v, %v; want %s after more than one read", cp.LSN, rd, err, third.LSN)
	}
}

// TestReadCheckpointLeaderNotReady: a leader that answers ListOffsets
// with OFFSET_NOT_AVAILABLE (its high watermark not yet past what the
// earlier leader acknowledged) or with a fenced leader epoch is asked
// again; the read returns the newest checkpoint.
func TestReadCheckpointLeaderNotReady(t *testing.T) {
	for _, code := range []*kerr.Error{kerr.OffsetNotAvailable, kerr.FencedLeaderEpoch, kerr.NotLeaderForPartition} {
		t.Run(code.Message, func(t *testing.T) {
			c := newTxnCluster(t)
			id, _, second := twoCheckpoints(t, c)
			var n atomic.Int32
			c.ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				if n.Add(1) > 3 {
					return nil, nil, false
				}
				lreq := req.(*kmsg.ListOffsetsRequest)
				resp := lreq.ResponseKind().(*kmsg.ListOffsetsResponse)
				for _, rt := range lreq.Topics {
					st := kmsg.NewListOffsetsResponseTopic()
					st.Topic = rt.Topic
					for _, rp := range rt.Partitions {
						sp := kmsg.NewListOffsetsResponseTopicPartition()
						sp.Partition, sp.ErrorCode = rp.Partition, code.Code
						st.Partitions = append(st.Partitions, sp)
					}
					resp.Topics = append(resp.Topics, st)
				}
				return resp, nil, true
			})
			cp, _, rd, err := kafka.ReadCheckpointFrom(ctx20(t), newReader(t, c), cpTopic, id, true)
			if err != nil || cp.LSN != second.LSN || rd.Reads != 4 {
				t.Fatalf("%s, %+v, %v; want %s after 4 reads", cp.LSN, rd, err, second.LSN)
			}
		})
	}
}

// TestReadCheckpointLeaderMoved: the read asks for the partition's leader
// afresh each time, not from the client's metadata cache (kadm's
// ListTopics answers from it for up to MetadataMinAge, 5 s): after the
// leader moved, a client that read before goes to the new leader at once.
func TestReadCheckpointLeaderMoved(t *testing.T) {
	c := newCluster(t, kfake.NumBrokers(3), kfake.SeedTopics(1, cpTopic))
	id, _, second := twoCheckpoints(t, c)
	cl := newReader(t, c)
	_, _, before, err := kafka.ReadCheckpointFrom(ctx20(t), cl, cpTopic, id, true)
	if err != nil {
		t.Fatal(err)
	}
	to := (before.Leader + 1) % 3
	if err := c.MoveTopicPartition(cpTopic, 0, to); err != nil {
		t.Fatal(err)
	}
	cp, _, rd, err := kafka.ReadCheckpointFrom(ctx20(t), cl, cpTopic, id, true)
	if err != nil || cp.LSN != second.LSN {
		t.Fatalf("after the move: %s, %v; want %s", cp.LSN, err, second.LSN)
	}
	if rd.Leader != to || rd.Reads != 1 {
		t.Fatalf("after moving the leader from node %d to %d: read %+v, want node %d in one read", before.Leader, to, rd, to)
	}
}

// TestReadCheckpointEmptyAnswersAtOnce: the first start's read of an
// empty checkpoint partition asks for an answer at once (MaxWait 0,
// MinBytes 0), not one the broker holds for up to 200 ms waiting for a
// record: the slot is free from the producer's initialisation until the
// stream starts, and another walpost of the slot that comes in that window
// fences this one's producer. A partition with records below its end is
// fetched as before.
func TestReadCheckpointEmptyAnswersAtOnce(t *testing.T) {
	for _, empty := range []bool{true, false} {
		c := newTxnCluster(t)
		id := kafka.TransactionalID("s1", 7)
		if !empty {
			id, _, _ = twoCheckpoints(t, c)
		}
		type fetch struct{ wait, min int32 }
		var mu sync.Mutex
		var fetches []fetch
		c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			freq := req.(*kmsg.FetchRequest)
			mu.Lock()
			fetches = append(fetches, fetch{freq.MaxWaitMillis, freq.MinBytes})
			mu.Unlock()
			return nil, nil, false
		})
		_, found, rd, err := kafka.ReadCheckpointFrom(ctx20(t), newReader(t, c), cpTopic, id, true)
		if err != nil || found == empty {
			t.Fatalf("empty %v: ReadCheckpointFrom: found %v, err %v", empty, found, err)
		}
		mu.Lock()
		got := fetches
		mu.Unlock()
		if len(got) == 0 {
			t.Fatalf("empty %v: no fetch (read %+v)", empty, rd)
		}
		for _, f := range got {
			if empty && (f.wait != 0 || f.min != 0) {
				t.Errorf("empty partition: fetch with MaxWaitMillis %d, MinBytes %d; want 0 and 0, an answer at once", f.wait, f.min)
			}
			if !empty && (f.wait != 200 || f.min != 1) {
				t.Errorf("records below the end %d: fetch with MaxWaitMillis %d, MinBytes %d; want 200 and 1", rd.HighWatermark, f.wait, f.min)
			}
		}
	}
}
