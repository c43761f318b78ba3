package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walpost/walpost/internal/leak"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// Every test of the package must leave no goroutine behind: the Kafka
// client, kfake and the consumers are all closed.
func TestMain(m *testing.M) {
	leak.VerifyTestMain(m)
}

const testTopic = "orders"

func newCluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(3, testTopic)}, opts...)...)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func newKafka(t *testing.T, c *kfake.Cluster, cfg kafka.Config) *kafka.Sink {
	t.Helper()
	cfg.Brokers = c.ListenAddrs()
	if cfg.DefaultTopic == "" {
		cfg.DefaultTopic = testTopic
	}
	k, err := kafka.New(cfg)
	if err != nil {
		t.Fatalf("kafka.New: %v", err)
	}
	t.Cleanup(k.Close)
	return k
}

// outcome is what the callbacks of one event saw.
type outcome struct {
	calls     int
	err       error
	partition int32
	offset    int64
}

// TestKafkaProduce produces 1,000 events, some with a partition key and some
// without, and checks every outcome, the order within each partition as a
// consumer sees it, and Kafka-compatible partitioning.
func TestKafkaProduce(t *testing.T) {
	const n = 1000
	c := newCluster(t)
	k := newKafka(t, c, kafka.Config{})

	rng := rand.New(rand.NewPCG(1, 2))
	pks := make([]string, 25)
	for i := range pks {
		pks[i] = fmt.Sprintf("customer-%d", rng.IntN(1_000_000))
	}
	events := make([]*outbox.Event, n)
	for i := range events {
		ev := &outbox.Event{
			ID:             fmt.Sprintf("00000000-0000-0000-0000-%012d", i),
			IdempotencyKey: fmt.Sprintf("evt-%04d-%d", i, rng.Uint32()),
			Payload:        []byte(fmt.Sprintf(`{"n": %d}`, i)),
			CreatedAt:      "2026-11-29 22:50:51.123456+00",
			CommitLSN:      0x16B3748,
			CommitTime:     time.Date(2026, 11, 29, 22, 50, 51, 0, time.UTC),
			Seq:            i,
		}
		switch r := rng.IntN(10); {
		case r < 7:
			ev.PartitionKey, ev.HasPartition = pks[rng.IntN(len(pks))], true
		case r < 8:
			ev.PartitionKey, ev.HasPartition = "", true // partition_key = '' (not NULL)
		}
		events[i] = ev
	}

	var mu sync.Mutex
	outcomes := make([]outcome, n)
	for i, ev := range events {
		k.Produce(ev, sink.AckFunc(func(r sink.Result, err error) {
			mu.Lock()
			defer mu.Unlock()
			o := &outcomes[i]
			o.calls++
			o.err = err
			o.partition, o.offset = r.Partition, r.Offset
		}))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := k.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}

	// (a) Each callback exactly once, with nil.
	mu.Lock()
	for i, o := range outcomes {
		if o.calls != 1 || o.err != nil {
			t.Errorf("event %d: callback called %d times, last error %v", i, o.calls, o.err)
		}
	}
	mu.Unlock()
	if t.Failed() {
		t.FailNow()
	}

	// (c), (d) Partitioning: Kafka's murmur2 on the partition key when
	// there is one, on the idempotency key otherwise.
	kafkaPart := kgo.StickyKeyPartitioner(nil).ForTopic(testTopic)
	byPK := map[string]int32{}
	used := map[int32]int{}
	for i, ev := range events {
		got := outcomes[i].partition
		used[got]++
		hashed := ev.IdempotencyKey
		if ev.HasPartition {
			hashed = ev.PartitionKey
			if p, ok := byPK[hashed]; ok && p != got {
				t.Errorf("event %d: partition key %q on partition %d, earlier on %d", i, hashed, got, p)
			}
			byPK[hashed] = got
		}
		if want := int32(kafkaPart.Partition(&kgo.Record{Key: []byte(hashed)}, 3)); got != want {
			t.Errorf("event %d (partition key %v %q, key %q): partition %d, Java client's murmur2 gives %d",
				i, ev.HasPartition, ev.PartitionKey, ev.IdempotencyKey, got, want)
		}
	}
	if len(used) != 3 {
		t.Errorf("records landed on partitions %v, want all 3 used", used)
	}

	// (b) Per-partition order equals Produce order, read back by a consumer.
	want := map[int32][]string{}
	for i, ev := range events {
		p := outcomes[i].partition
		want[p] = append(want[p], ev.IdempotencyKey)
	}
	got := consumeAll(t, c, testTopic, n)
	for p := range int32(3) {
		if len(got[p]) != len(want[p]) {
			t.Errorf("partition %d: consumed %d records, produced %d", p, len(got[p]), len(want[p]))
			continue
		}
		for j, r := range got[p] {
			if string(r.Key) != want[p][j] {
				t.Errorf("partition %d, offset %d: key %q, want %q (Produce order)", p, r.Offset, r.Key, want[p][j])
				break
			}
			if r.Offset != int64(j) {
				t.Errorf("partition %d: record %d at offset %d", p, j, r.Offset)
			}
		}
	}
	// The consumed records carry the envelope.
	for _, rs := range got {
		for _, r := range rs {
			if len(r.Headers) < 4 || r.Headers[0].Key != kafka.HeaderIdempotencyKey || string(r.Headers[0].Value) != string(r.Key) {
				t.Fatalf("record %q: headers %v", r.Key, r.Headers)
			}
		}
	}
}

// consumeAll reads n records of topic from the start and returns them per
// partition in offset order.
func consumeAll(t *testing.T, c *kfake.Cluster, topic string, n int) map[int32][]*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	out := map[int32][]*kgo.Record{}
	for total := 0; total < n; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records before the deadline", total, n)
		}
		if errs := fs.Errors(); len(errs) > 0 {
			t.Fatalf("fetch: %v", errs)
		}
		fs.EachRecord(func(r *kgo.Record) {
			out[r.Partition] = append(out[r.Partition], r)
			total++
		})
	}
	return out
}

// A row whose record cannot be built is reported at once, exactly once.
func TestKafkaProduceUnbuildable(t *testing.T) {
	c := newCluster(t)
	k := newKafka(t, c, kafka.Config{})
	calls := 0
	var got error
	k.Produce(&outbox.Event{ID: "x", Payload: []byte("{}")}, sink.AckFunc(func(r sink.Result, err error) {
		calls++
		got = err
		if r.Partition != -1 {
			t.Errorf("result %+v with a build error, want partition -1", r)
		}
		if kind, class := sink.KindOf(err); kind != sink.Record || class != "EMPTY_KEY" {
			t.Errorf("build error classified %s/%s, want record/EMPTY_KEY", kind, class)
		}
	}))
	if calls != 1 || !errors.Is(got, kafka.ErrEmptyKey) {
		t.Errorf("callback called %d times with %v, want once with ErrEmptyKey", calls, got)
	}
	k.Produce(&outbox.Event{ID: "y", IdempotencyKey: "k", Payload: []byte("{}"), Headers: []byte(`{"a": 1}`)}, sink.AckFunc(func(_ sink.Result, err error) {
		calls++
		got = err
	}))
	if calls != 2 || !errors.Is(got, kafka.ErrInvalidHeaders) {
		t.Errorf("callback called %d times with %v, want once more with ErrInvalidHeaders", calls, got)
	}
}

func TestDescribeTopic(t *testing.T) {
	c := newCluster(t)
	k := newKafka(t, c, kafka.Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	t.Run("seeded topic: broker default max.message.bytes", func(t *testing.T) {
		info, err := kafka.DescribeTopic(ctx, k.Client(), testTopic)
		if err != nil {
			t.Fatal(err)
		}
		// kfake answers DescribeConfigs with Kafka's default, 1048588.
		if info.Name != testTopic || info.Partitions != 3 || info.MaxMessageBytes != 1048588 {
			t.Errorf("DescribeTopic = %+v, want 3 partitions and max.message.bytes 1048588", info)
		}
	})

	t.Run("topic with its own max.message.bytes", func(t *testing.T) {
		v := "200000"
		resp, err := kadm.NewClient(k.Client()).CreateTopic(ctx, 5, 1, map[string]*string{"max.message.bytes": &v}, "big")
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			t.Fatalf("create topic: %v", err)
		}
		info, err := kafka.DescribeTopic(ctx, k.Client(), "big")
		if err != nil {
			t.Fatal(err)
		}
		if info.Partitions != 5 || info.MaxMessageBytes != 200000 {
			t.Errorf("DescribeTopic = %+v, want 5 partitions and max.message.bytes 200000", info)
		}
	})

	t.Run("unknown topic", func(t *testing.T) {
		info, err := kafka.DescribeTopic(ctx, k.Client(), "no-such-topic")
		if !errors.Is(err, kafka.ErrTopicMissing) {
			t.Fatalf("DescribeTopic(no-such-topic) = %+v, %v; want ErrTopicMissing", info, err)
		}
	})

	t.Run("CreateTopic is idempotent", func(t *testing.T) {
		for range 2 {
			if err := kafka.CreateTopic(ctx, k.Client(), "made", 2); err != nil {
				t.Fatal(err)
			}
		}
		info, err := kafka.DescribeTopic(ctx, k.Client(), "made")
		if err != nil || info.Partitions != 2 {
			t.Errorf("DescribeTopic(made) = %+v, %v", info, err)
		}
	})
}

func TestNewValidates(t *testing.T) {
	for _, cfg := range []kafka.Config{
		{DefaultTopic: "t"},
		{Brokers: []string{"127.0.0.1:1"}},
		{Brokers: []string{"127.0.0.1:1"}, DefaultTopic: "t", Compression: "brotli"},
	} {
		if k, err := kafka.New(cfg); err == nil {
			k.Close()
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

// A missing topic is a destination error: the callback reports it (once)
// instead of the client creating the topic or retrying forever.
func TestKafkaProduceMissingTopic(t *testing.T) {
	c := newCluster(t)
	k := newKafka(t, c, kafka.Config{})
	done := make(chan error, 2)
	k.Produce(&outbox.Event{ID: "x", IdempotencyKey: "k", Payload: []byte("{}"), Topic: "no-such-topic"}, sink.AckFunc(func(_ sink.Result, err error) {
		done <- err
	}))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := k.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Errorf("callback error %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
		}
	default:
		t.Fatal("no outcome after Flush")
	}
	if len(done) != 0 {
		t.Errorf("callback called again with %v", <-done)
	}
	info, err := kafka.DescribeTopic(ctx, k.Client(), "no-such-topic")
	if !errors.Is(err, kafka.ErrTopicMissing) {
		t.Errorf("the topic was created: %+v, %v", info, err)
	}
}

// A record above its topic's max.message.bytes fails before it is sent,
// alone: its neighbours on the same partition are delivered, in order.
func TestKafkaSizePreCheck(t *testing.T) {
	c := newCluster(t)
	k := newKafka(t, c, kafka.Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	limit := "2048"
	resp, err := kadm.NewClient(k.Client()).CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &limit}, "small")
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic: %v", err)
	}
	payloads := []string{`{"n": 1}`, `{"big": "` + strings.Repeat("x", 4096) + `"}`, `{"n": 3}`}
	var mu sync.Mutex
	errs := make([][]error, len(payloads))
	for i, p := range payloads {
		ev := &outbox.Event{ID: fmt.Sprint(i), IdempotencyKey: fmt.Sprintf("size-%d", i), Payload: []byte(p), Topic: "small"}
		k.Produce(ev, sink.AckFunc(func(_ sink.Result, err error) {
			mu.Lock()
			errs[i] = append(errs[i], err)
			mu.Unlock()
		}))
	}
	if err := k.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, es := range errs {
		if len(es) != 1 {
			t.Fatalf("event %d: %d callbacks (%v), want 1", i, len(es), es)
		}
	}
	if errs[0][0] != nil || errs[2][0] != nil {
		t.Errorf("neighbours of the large record failed: %v, %v", errs[0][0], errs[2][0])
	}
	if !errors.Is(errs[1][0], kafka.ErrRecordTooLarge) || !errors.Is(errs[1][0], kerr.MessageTooLarge) {
		t.Errorf("large record: %v, want ErrRecordTooLarge (MESSAGE_TOO_LARGE)", errs[1][0])
	}
	got := consumeAll(t, c, "small", 2)
	if len(got[0]) != 2 || string(got[0][0].Key) != "size-0" || string(got[0][1].Key) != "size-2" {
		t.Errorf("consumed %v, want size-0 then size-2", got[0])
	}
}

// batchCodecs records the compression of every batch written.
type batchCodecs struct {
	mu     sync.Mutex
	codecs []uint8
}

func (h *batchCodecs) OnProduceBatchWritten(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.ProduceBatchMetrics) {
	h.mu.Lock()
	h.codecs = append(h.codecs, m.CompressionType)
	h.mu.Unlock()
}

// TestCompressionCodecs checks that the configured codec is the one the
// batches carry, and that an empty setting means snappy.
func TestCompressionCodecs(t *testing.T) {
	c := newCluster(t)
	for _, tc := range []struct {
		name string
		want uint8 // the record batch's compression attribute
	}{{"", 2}, {"snappy", 2}, {"lz4", 3}, {"zstd", 4}, {"gzip", 1}, {"none", 0}} {
		h := &batchCodecs{}
		k := newKafka(t, c, kafka.Config{Compression: tc.name, ProducerOpts: []kgo.Opt{kgo.WithHooks(h)}})
		ev := &outbox.Event{
			ID: "1", IdempotencyKey: "codec-" + tc.name, CreatedAt: "2026-11-30 04:42:00+00",
			Payload: []byte(`{"note": "` + strings.Repeat("compressible text ", 50) + `"}`),
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := sink.ProduceSync(ctx, k, ev)
		cancel()
		if err != nil {
			t.Fatalf("compression %q: produce: %v", tc.name, err)
		}
		// The hook runs after the promise: wait for it.
		var got []uint8
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			h.mu.Lock()
			got = slicesClone(h.codecs)
			h.mu.Unlock()
			if len(got) > 0 || time.Now().After(deadline) {
				break
			}
		}
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("compression %q: batches written with codecs %v, want [%d]", tc.name, got, tc.want)
		}
	}
}

func slicesClone(s []uint8) []uint8 { return append([]uint8(nil), s...) }

// produceWait produces ev and returns its outcome.
func produceWait(t *testing.T, k *kafka.Sink, ev *outbox.Event) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	err := sink.ProduceSync(ctx, k, ev)
	if ctx.Err() != nil {
		t.Fatalf("no outcome for %s: %v", ev.IdempotencyKey, ctx.Err())
	}
	return err
}

// A topic's max.message.bytes raised while the sink runs reaches it: a
// record that fails the pre-check against the cached limit makes the sink
// read the limit again before calling it too large, and the client's
// partitions take the new limit, so the record is delivered, not
// quarantined.
func TestKafkaRaisedLimitReachesRunningSink(t *testing.T) {
	c := newCluster(t)
	k := newKafka(t, c, kafka.Config{})
	// No periodic refresh: only the pre-check failure may read again.
	kafka.SetLimitIntervals(k, time.Hour, 0, time.Hour)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	adm := kadm.NewClient(k.Client())
	limit := "2048"
	resp, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &limit}, "small")
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic: %v", err)
	}
	ev := func(key, payload string) *outbox.Event {
		return &outbox.Event{ID: key, IdempotencyKey: key, Payload: []byte(payload), Topic: "small"}
	}
	big := `{"big": "` + strings.Repeat("x", 4096) + `"}`
	if err := produceWait(t, k, ev("before", `{"n": 1}`)); err != nil {
		t.Fatalf("small record: %v", err)
	}
	if err := produceWait(t, k, ev("too-big", big)); !errors.Is(err, kafka.ErrRecordTooLarge) {
		t.Fatalf("4 KiB record under a 2048-byte limit: %v, want ErrRecordTooLarge", err)
	}
	raised := "16384"
	ar, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &raised}}, "small")
	if err == nil {
		_, err = ar.On("small", nil)
	}
	if err != nil {
		t.Fatalf("raise max.message.bytes: %v", err)
	}
	if err := produceWait(t, k, ev("fits-now", big)); err != nil {
		t.Fatalf("4 KiB record after the limit was raised to %s: %v, want it delivered", raised, err)
	}
	if err := produceWait(t, k, ev("after", `{"n": 3}`)); err != nil {
		t.Fatalf("small record after: %v", err)
	}
	got := consumeAll(t, c, "small", 3)
	var keys []string
	for _, r := range got[0] {
		keys = append(keys, string(r.Key))
	}
	if strings.Join(keys, ",") != "before,fits-now,after" {
		t.Errorf("consumed %v, want before, fits-now, after", keys)
	}
}

// Records that fail the pre-check do not each read the limit: the re-read
// before reporting one too large is rate-limited per topic.
func TestKafkaTooLargeRecheckIsRateLimited(t *testing.T) {
	c := newCluster(t, kfake.SeedTopics(1, "capped"))
	var mu sync.Mutex
	describes := 0
	c.ControlKey(int16(kmsg.DescribeConfigs), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		mu.Lock()
		describes++
		mu.Unlock()
		return nil, nil, false
	})
	k := newKafka(t, c, kafka.Config{})
	big := `{"big": "` + strings.Repeat("x", 2<<20) + `"}`
	for i := range 20 {
		key := fmt.Sprintf("big-%d", i)
		err := produceWait(t, k, &outbox.Event{ID: key, IdempotencyKey: key, Payload: []byte(big), Topic: "capped"})
		if !errors.Is(err, kafka.ErrRecordTooLarge) {
			t.Fatalf("%s: %v, want ErrRecordTooLarge", key, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if describes < 1 || describes > 3 {
		t.Errorf("20 oversized records sent %d DescribeConfigs requests, want 1 to 3 (read once, re-read at most once a second)", describes)
	}
}

// A topic limit that cannot be read is never guessed: a record larger
// than Kafka's default but within its topic's limit waits in the sink
// (no outcome: neither too large nor a transient failure that restarts
// the session) and is delivered once the limit can be read.
func TestKafkaUnreadableLimitIsTransient(t *testing.T) {
	c := newCluster(t)
	var refuse atomic.Bool
	var describes atomic.Int64
	refuse.Store(true)
	unreadableLimits(c, &refuse, &describes)
	k := newKafka(t, c, kafka.Config{})
	kafka.SetLimitIntervals(k, time.Hour, time.Hour, 20*time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	limit := "4194304"
	resp, err := kadm.NewClient(k.Client()).CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &limit}, "roomy")
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic: %v", err)
	}
	// 1.5 MiB: above Kafka's default max.message.bytes, within the topic's.
	ev := &outbox.Event{ID: "1", IdempotencyKey: "roomy-1", Payload: []byte(`{"b": "` + strings.Repeat("y", 3<<19) + `"}`), Topic: "roomy"}
	out := make(chan error, 2)
	k.Produce(ev, sink.AckFunc(func(_ sink.Result, err error) { out <- err }))
	before := describes.Load()
	waitUntil(t, 10*time.Second, "three more failed reads of the limit", func() bool { return describes.Load() >= before+3 })
	select {
	case err := <-out:
		t.Fatalf("limit unreadable: outcome %v, want the record held without an outcome", err)
	default:
	}
	refuse.Store(false)
	select {
	case err := <-out:
		if err != nil {
			t.Fatalf("limit readable again: %v, want the record delivered", err)
		}
	case <-ctx.Done():
		t.Fatal("no outcome once the limit could be read")
	}
	if got := consumeAll(t, c, "roomy", 1); len(got[0]) != 1 || string(got[0][0].Key) != "roomy-1" {
		t.Errorf("consumed %v, want roomy-1", got[0])
	}
}

// Data loss franz-go detects (OUT_OF_ORDER_SEQUENCE_NUMBER after earlier
// acks) reaches Config.OnDataLoss with its topic and partition; the client
// goes on and the record is delivered.
func TestKafkaDataLossReachesOnDataLoss(t *testing.T) {
	c := newCluster(t, kfake.SeedTopics(1, "lossy"))
	type loss struct {
		topic     string
		partition int32
	}
	losses := make(chan loss, 4)
	k := newKafka(t, c, kafka.Config{OnDataLoss: func(topic string, partition int32) { losses <- loss{topic, partition} }})
	ev := func(key string) *outbox.Event {
		return &outbox.Event{ID: key, IdempotencyKey: key, Payload: []byte(`{}`), Topic: "lossy"}
	}
	if err := produceWait(t, k, ev("acked")); err != nil {
		t.Fatalf("first record: %v", err)
	}
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Partitions: []int32{0}, Err: kerr.OutOfOrderSequenceNumber, Count: 1})
	if err := produceWait(t, k, ev("after-loss")); err != nil {
		t.Fatalf("record after the loss: %v", err)
	}
	select {
	case l := <-losses:
		if l != (loss{"lossy", 0}) {
			t.Errorf("OnDataLoss(%q, %d), want (lossy, 0)", l.topic, l.partition)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnDataLoss was not called")
	}
}
