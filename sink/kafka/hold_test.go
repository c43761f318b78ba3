package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// unreadableLimits makes the cluster's DescribeConfigs answers fail (an
// error that is neither an authorization refusal nor a missing topic)
// while down is set, and counts the requests.
func unreadableLimits(c *kfake.Cluster, down *atomic.Bool, describes *atomic.Int64) {
	c.ControlKey(int16(kmsg.DescribeConfigs), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		describes.Add(1)
		if !down.Load() {
			return nil, nil, false
		}
		return failedDescribe(kreq, kerr.UnknownServerError.Code), nil, true
	})
}

// failedDescribe answers a DescribeConfigs request with the error code
// for each of its resources.
func failedDescribe(kreq kmsg.Request, code int16) kmsg.Response {
	req := kreq.(*kmsg.DescribeConfigsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	for _, r := range req.Resources {
		rr := kmsg.NewDescribeConfigsResponseResource()
		rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
		rr.ErrorCode = code
		resp.Resources = append(resp.Resources, rr)
	}
	return resp
}

// produceHeld produces n records to "fresh", whose limit cannot be read,
// and checks that all n are held.
func produceHeld(t *testing.T, k *kafka.Sink, n int) *outcomes {
	t.Helper()
	held := newOutcomes(n)
	for i := range n {
		k.Produce(heldEvent(i, "fresh"), held.acker(i))
	}
	if k.Held() != n {
		t.Fatalf("%d held, want %d", k.Held(), n)
	}
	return held
}

// outcomes records each event's acknowledgements by index.
type outcomes struct {
	mu    sync.Mutex
	calls []int
	errs  []error
	offs  []int64
	parts []int32
}

func newOutcomes(n int) *outcomes {
	return &outcomes{calls: make([]int, n), errs: make([]error, n), offs: make([]int64, n), parts: make([]int32, n)}
}

func (o *outcomes) acker(i int) sink.Acker {
	return sink.AckFunc(func(r sink.Result, err error) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.calls[i]++
		o.errs[i], o.offs[i], o.parts[i] = err, r.Offset, r.Partition
	})
}

func (o *outcomes) acked() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, c := range o.calls {
		if c > 0 {
			n++
		}
	}
	return n
}

func heldEvent(i int, topic string) *outbox.Event {
	return &outbox.Event{
		ID: fmt.Sprintf("00000000-0000-0000-0000-%012d", i), IdempotencyKey: fmt.Sprintf("%s-%04d", topic, i),
		Payload: []byte(fmt.Sprintf(`{"n": %d}`, i)), Topic: topic, PartitionKey: "one-partition", HasPartition: true,
		CommitLSN: 0x16B3748, CommitTime: time.Now(), Seq: i,
	}
}

// TestHeldUntilTheTopicsLimitIsRead: while a topic's max.message.bytes
// cannot be read (Kafka does not answer the describe), its records wait in
// the sink, with no outcome (never a transient failure that would restart
// the session, never a size decided on a guessed limit), while records
// of a topic whose limit is known go on; once the limit is read they are
// sent, each acknowledged once, in the order produced; Flush waits for
// them.
func TestHeldUntilTheTopicsLimitIsRead(t *testing.T) {
	c := newCluster(t, kfake.SeedTopics(3, "fresh"))
	var down atomic.Bool
	var describes atomic.Int64
	unreadableLimits(c, &down, &describes)
	k := newKafka(t, c, kafka.Config{})
	kafka.SetLimitIntervals(k, time.Minute, time.Second, 20*time.Millisecond)

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	known := newOutcomes(1)
	k.Produce(heldEvent(0, testTopic), known.acker(0)) // the default topic's limit is read
	if err := k.Flush(ctx); err != nil || known.errs[0] != nil {
		t.Fatalf("first record of the default topic: flush %v, outcome %v", err, known.errs[0])
	}

	down.Store(true)
	const n = 200
	held := newOutcomes(n)
	for i := range n {
		k.Produce(heldEvent(i, "fresh"), held.acker(i))
	}
	// Several failed reads later, nothing of "fresh" has an outcome...
	before := describes.Load()
	waitUntil(t, 10*time.Second, "three more failed reads of the limit", func() bool { return describes.Load() >= before+3 })
	if a := held.acked(); a != 0 || k.Held() != n {
		t.Fatalf("while the limit cannot be read: %d of %d records have an outcome, %d held; want 0 and all held", a, n, k.Held())
	}
	// ...records of the topic whose limit is known are not held...
	other := newOutcomes(10)
	for i := range 10 {
		k.Produce(heldEvent(100+i, testTopic), other.acker(i))
	}
	waitUntil(t, 10*time.Second, "the known topic's records acknowledged", func() bool { return other.acked() == 10 })
	// ...and Flush waits for the held ones.
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	err := k.Flush(short)
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush with records held = %v, want it to wait for them (deadline exceeded)", err)
	}

	down.Store(false)
	if err := k.Flush(ctx); err != nil {
		t.Fatalf("Flush once the limit can be read: %v", err)
	}
	held.mu.Lock()
	defer held.mu.Unlock()
	for i := range n {
		if held.calls[i] != 1 || held.errs[i] != nil {
			t.Fatalf("held record %d: %d outcomes, last %v; want one, nil", i, held.calls[i], held.errs[i])
		}
		if i > 0 && (held.parts[i] != held.parts[0] || held.offs[i] <= held.offs[i-1]) {
			t.Fatalf("held record %d at %d/%d after record %d at %d/%d: the order produced is lost",
				i, held.parts[i], held.offs[i], i-1, held.parts[i-1], held.offs[i-1])
		}
	}
	if k.Held() != 0 {
		t.Errorf("%d records still held after Flush", k.Held())
	}
}

// TestHeldWhileTheLimitIsReadAgain: while the sink tries the topic's limit
// again, its held records still count as held (Held, the
// walpost_kafka_held_records gauge): they were taken out of the queue for
// the try, and the count fell to 0 for as long as the describe took.
func TestHeldWhileTheLimitIsReadAgain(t *testing.T) {
	c := newCluster(t, kfake.SeedTopics(3, "fresh"))
	var down atomic.Bool
	var describes atomic.Int64
	var gate atomic.Pointer[chan struct{}]
	c.ControlKey(int16(kmsg.DescribeConfigs), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		describes.Add(1)
		if !down.Load() {
			return nil, nil, false
		}
		if g := gate.Load(); g != nil {
			c.SleepControl(func() { <-*g }) // the describe takes until the gate opens
		}
		return failedDescribe(kreq, kerr.UnknownServerError.Code), nil, true
	})
	k := newKafka(t, c, kafka.Config{})
	kafka.SetLimitIntervals(k, time.Minute, time.Second, 20*time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	known := newOutcomes(1)
	k.Produce(heldEvent(0, testTopic), known.acker(0))
	if err := k.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	down.Store(true)
	const n = 50
	held := produceHeld(t, k, n)
	g := make(chan struct{})
	before := describes.Load()
	gate.Store(&g)
	waitUntil(t, 10*time.Second, "a describe of the limit in progress", func() bool { return describes.Load() > before })
	if got := k.Held(); got != n || held.acked() != 0 {
		t.Errorf("while the limit is read again: %d held, %d with an outcome; want %d and 0", got, held.acked(), n)
	}
	gate.Store(nil)
	close(g)
	down.Store(false)
	if err := k.Flush(ctx); err != nil {
		t.Fatalf("Flush once the limit can be read: %v", err)
	}
	if k.Held() != 0 || held.acked() != n {
		t.Fatalf("%d held, %d with an outcome after Flush; want 0 and %d", k.Held(), held.acked(), n)
	}
}

// TestHeldRecordsFailOnClose: Close gives each held record one outcome, a
// transient failure (the next session sends it again from the slot).
func TestHeldRecordsFailOnClose(t *testing.T) {
	c := newCluster(t, kfake.SeedTopics(3, "fresh"))
	var down atomic.Bool
	var describes atomic.Int64
	down.Store(true)
	unreadableLimits(c, &down, &describes)
	k, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs(), DefaultTopic: testTopic})
	if err != nil {
		t.Fatal(err)
	}
	kafka.SetLimitIntervals(k, time.Minute, time.Second, time.Hour)
	const n = 20
	held := produceHeld(t, k, n)
	k.Close()
	held.mu.Lock()
	defer held.mu.Unlock()
	for i := range n {
		var se *sink.Error
		if held.calls[i] != 1 || !errors.As(held.errs[i], &se) || se.Kind != sink.Transient {
			t.Fatalf("held record %d after Close: %d outcomes, last %v; want one transient failure", i, held.calls[i], held.errs[i])
		}
	}
}

// TestExactlyOnceDoesNotHold: a transactional sink does not hold records
// (they must reach the client before the transaction commits): an
// unreadable limit is a transient failure at once.
func TestExactlyOnceDoesNotHold(t *testing.T) {
	c := newCluster(t, kfake.SeedTopics(3, "fresh"))
	var down atomic.Bool
	var describes atomic.Int64
	down.Store(true)
	unreadableLimits(c, &down, &describes)
	k := newKafka(t, c, kafka.Config{TransactionalID: "walpost-test"})
	out := newOutcomes(1)
	k.Produce(heldEvent(0, "fresh"), out.acker(0))
	out.mu.Lock()
	defer out.mu.Unlock()
	var se *sink.Error
	if out.calls[0] != 1 || !errors.As(out.errs[0], &se) || se.Kind != sink.Transient || !errors.Is(out.errs[0], kafka.ErrLimitUnknown) {
		t.Fatalf("transactional Produce with the limit unreadable: %d outcomes, %v; want one transient ErrLimitUnknown", out.calls[0], out.errs[0])
	}
	if k.Held() != 0 {
		t.Errorf("a transactional sink holds %d records", k.Held())
	}
}

func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHeldBehindAFailedRecord: when a held record fails on release (here:
// larger than the topic's limit, read once Kafka answers), the records
// held behind it fail too, as transient (sent again from the slot, in
// order), never sent ahead of it.
func TestHeldBehindAFailedRecord(t *testing.T) {
	c := newCluster(t)
	var down atomic.Bool
	var describes atomic.Int64
	unreadableLimits(c, &down, &describes)
	k := newKafka(t, c, kafka.Config{})
	kafka.SetLimitIntervals(k, time.Minute, time.Minute, 20*time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	limit := "2000"
	resp, err := kadm.NewClient(k.Client()).CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &limit}, "small")
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic: %v", err)
	}
	down.Store(true)
	out := newOutcomes(4)
	big := heldEvent(0, "small")
	big.Payload = []byte(`{"b": "` + strings.Repeat("x", 4000) + `"}`)
	k.Produce(big, out.acker(0))
	for i := 1; i < 4; i++ {
		k.Produce(heldEvent(i, "small"), out.acker(i))
	}
	if k.Held() != 4 {
		t.Fatalf("%d held, want 4", k.Held())
	}
	down.Store(false)
	if err := k.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	if out.calls[0] != 1 || !errors.Is(out.errs[0], kafka.ErrRecordTooLarge) {
		t.Fatalf("the oversized held record: %d outcomes, %v; want one ErrRecordTooLarge", out.calls[0], out.errs[0])
	}
	for i := 1; i < 4; i++ {
		if kind, _ := sink.KindOf(out.errs[i]); out.calls[i] != 1 || kind != sink.Transient || !errors.Is(out.errs[i], kafka.ErrHeldBehind) {
			t.Fatalf("record %d held behind it: %d outcomes, %v (%s); want one transient ErrHeldBehind", i, out.calls[i], out.errs[i], kind)
		}
	}
	ends, err := kadm.NewClient(k.Client()).ListEndOffsets(ctx, "small")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := ends.Lookup("small", 0); o.Err != nil || o.Offset != 0 {
		t.Errorf("topic end offset %d (%v): records reached Kafka ahead of the failed one, want 0", o.Offset, o.Err)
	}
}
