package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// TestClassify: each error class of DESIGN.md, Kafka facts, maps to its Kind and names
// its class, bare and wrapped (the client and walpost both wrap).
func TestClassify(t *testing.T) {
	tests := []struct {
		err   error
		kind  sink.Kind
		class string
	}{
		// Record-level: isolated, retried, then quarantined.
		{kerr.MessageTooLarge, sink.Record, "MESSAGE_TOO_LARGE"},
		{kerr.RecordListTooLarge, sink.Record, "RECORD_LIST_TOO_LARGE"},
		{kerr.InvalidRecord, sink.Record, "INVALID_RECORD"},
		{kerr.CorruptMessage, sink.Record, "CORRUPT_MESSAGE"},
		{kerr.InvalidTimestamp, sink.Record, "INVALID_TIMESTAMP"},
		{kerr.PolicyViolation, sink.Record, "POLICY_VIOLATION"},
		{kafka.ErrRecordTooLarge, sink.Record, "MESSAGE_TOO_LARGE"},
		{fmt.Errorf("%w (record of about 2000 bytes, topic %q allows 1024)", kafka.ErrRecordTooLarge, "t"), sink.Record, "MESSAGE_TOO_LARGE"},
		{kafka.ErrInvalidHeaders, sink.Record, "INVALID_HEADERS"},
		{fmt.Errorf("%w: header %q is %T", kafka.ErrInvalidHeaders, "a", 1.0), sink.Record, "INVALID_HEADERS"},
		{kafka.ErrEmptyKey, sink.Record, "EMPTY_KEY"},

		// Destination: halt and alert, never poison.
		{kerr.TopicAuthorizationFailed, sink.Destination, "TOPIC_AUTHORIZATION_FAILED"},
		{kerr.ClusterAuthorizationFailed, sink.Destination, "CLUSTER_AUTHORIZATION_FAILED"},
		{kerr.UnknownTopicOrPartition, sink.Destination, "UNKNOWN_TOPIC_OR_PARTITION"},
		{kerr.UnknownTopicID, sink.Destination, "UNKNOWN_TOPIC_ID"},
		{kerr.TransactionalIDAuthorizationFailed, sink.Destination, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"},
		{kerr.SaslAuthenticationFailed, sink.Destination, "SASL_AUTHENTICATION_FAILED"},
		{kerr.InvalidTopicException, sink.Destination, "INVALID_TOPIC_EXCEPTION"},

		// Transient: retried inside the client; one reaching a callback
		// ends the session, never poison.
		{kerr.NotLeaderForPartition, sink.Transient, "NOT_LEADER_FOR_PARTITION"},
		{kerr.RequestTimedOut, sink.Transient, "REQUEST_TIMED_OUT"},
		{kerr.NotEnoughReplicas, sink.Transient, "NOT_ENOUGH_REPLICAS"},
		{kerr.NotEnoughReplicasAfterAppend, sink.Transient, "NOT_ENOUGH_REPLICAS_AFTER_APPEND"},
		{kerr.NetworkException, sink.Transient, "NETWORK_EXCEPTION"},
		{kerr.LeaderNotAvailable, sink.Transient, "LEADER_NOT_AVAILABLE"},
		{kgo.ErrClientClosed, sink.Transient, "CLIENT"},
		{kgo.ErrRecordTimeout, sink.Transient, "CLIENT"},
		{kgo.ErrRecordRetries, sink.Transient, "CLIENT"},
		{context.Canceled, sink.Transient, "CLIENT"},
		{context.DeadlineExceeded, sink.Transient, "CLIENT"},
		// The transaction was aborted by the broker (timeout) or the
		// producer fenced: the next session's producer decides.
		{kerr.InvalidProducerEpoch, sink.Transient, "INVALID_PRODUCER_EPOCH"},

		// Unknown: treated like a destination failure.
		{kerr.OutOfOrderSequenceNumber, sink.Unknown, "OUT_OF_ORDER_SEQUENCE_NUMBER"},
		{kerr.UnknownServerError, sink.Unknown, "UNKNOWN_SERVER_ERROR"},
		{errors.New("something else"), sink.Unknown, "UNKNOWN"},
	}
	for _, tt := range tests {
		for _, err := range []error{tt.err, fmt.Errorf("produce to %q: %w", "orders", tt.err)} {
			t.Run(err.Error(), func(t *testing.T) {
				kind, class := kafka.Classify(err)
				if kind != tt.kind || class != tt.class {
					t.Errorf("Classify(%v) = %s, %q; want %s, %q", err, kind, class, tt.kind, tt.class)
				}
			})
		}
	}
	if kind, class := kafka.Classify(nil); kind != sink.Transient || class != "" {
		t.Errorf("Classify(nil) = %s, %q; want transient, \"\"", kind, class)
	}
}

// TestClassifyRequestLevelIsNeverRecord: errors about the producer or the
// request as a whole, not one record, must end the session rather than
// quarantine records one by one until the breaker trips (DESIGN.md, Kafka facts lists
// the record-level classes; these are not among them).
func TestClassifyRequestLevelIsNeverRecord(t *testing.T) {
	for _, err := range []error{
		kerr.InvalidRequiredAcks,      // the producer's acks setting
		kerr.OutOfOrderSequenceNumber, // data-loss signal
		kerr.UnknownProducerID,        // data-loss signal
		kerr.InvalidProducerEpoch,     // aborted transaction or fenced producer
		kerr.UnsupportedForMessageFormat,
	} {
		if kind, class := kafka.Classify(err); kind == sink.Record {
			t.Errorf("Classify(%v) = %s, %q: a request-level error would poison every record", err, kind, class)
		}
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[sink.Kind]string{
		sink.Transient: "transient", sink.Record: "record", sink.Destination: "destination", sink.Unknown: "unknown", sink.Kind(42): "unknown",
	} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", int(k), got, want)
		}
	}
}

// TestExplain: each destination failure gets the fix in its message and
// keeps its cause for errors.Is; other errors pass unchanged.
func TestExplain(t *testing.T) {
	const topic = "orders.v1"
	tests := []struct {
		err  error
		want []string // substrings of the message
	}{
		{kerr.TopicAuthorizationFailed, []string{`"orders.v1"`, "grant", "WRITE", "kafka-acls.sh", "--topic orders.v1"}},
		{fmt.Errorf("produce: %w", kerr.TopicAuthorizationFailed), []string{"produce: ", "kafka-acls.sh"}},
		{kerr.ClusterAuthorizationFailed, []string{"IDEMPOTENT_WRITE", "grant"}},
		{kerr.UnknownTopicOrPartition, []string{`topic "orders.v1" does not exist`, "create it", "kafka.topic"}},
		{kerr.UnknownTopicID, []string{`topic "orders.v1" does not exist`, "create it"}},
	}
	for _, tt := range tests {
		got := kafka.Explain(tt.err, topic)
		if !errors.Is(got, tt.err) {
			t.Errorf("Explain(%v) = %v, which no longer wraps the cause", tt.err, got)
		}
		for _, w := range tt.want {
			if !strings.Contains(got.Error(), w) {
				t.Errorf("Explain(%v) = %q, missing %q", tt.err, got, w)
			}
		}
	}
	for _, err := range []error{kerr.InvalidRecord, kafka.ErrInvalidHeaders, errors.New("plain")} {
		if got := kafka.Explain(err, topic); got != err {
			t.Errorf("Explain(%v) = %v, want it unchanged", err, got)
		}
	}
}

// batchSizes records the size of every record batch produced, by the key
// of its first record.
type batchSizes struct {
	mu sync.Mutex
	n  map[string]int
}

// control observes produce requests; it never answers them (a control
// that does not handle a request stays installed).
func (b *batchSizes) control(kreq kmsg.Request) (kmsg.Response, error, bool) {
	for _, rt := range kreq.(*kmsg.ProduceRequest).Topics {
		for _, rp := range rt.Partitions {
			var batch kmsg.RecordBatch
			if batch.ReadFrom(rp.Records) != nil {
				continue
			}
			recs, err := kfake.BatchRecords(batch)
			if err != nil || len(recs) == 0 {
				continue
			}
			b.mu.Lock()
			b.n[string(recs[0].Key)] = len(rp.Records)
			b.mu.Unlock()
		}
	}
	return nil, nil, false
}

func (b *batchSizes) get(key string) (int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, ok := b.n[key]
	return n, ok
}

// produceOne produces r alone and waits for its outcome.
func produceOne(t *testing.T, k *kafka.Sink, r *kgo.Record) error {
	t.Helper()
	ch := make(chan error, 1)
	k.ProduceRecord(r, func(err error) { ch <- err })
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("no outcome for %s", r.Key)
		return nil
	}
}

// TestCheckSize: the size pre-check reads the topic's max.message.bytes
// from the broker, takes a record of exactly the limit (which the broker
// then accepts), refuses one byte more before sending it, and classifies
// that as MESSAGE_TOO_LARGE. Config.MaxMessageBytes overrides the topic.
func TestCheckSize(t *testing.T) {
	const limit = 2048
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	defer c.Close()
	sizes := &batchSizes{n: map[string]int{}}
	c.ControlKey(int16(kmsg.Produce), sizes.control)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	admin, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	v := fmt.Sprint(limit)
	resp, err := kadm.NewClient(admin).CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &v}, "small")
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic: %v", err)
	}

	k, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs(), DefaultTopic: "small", Compression: "none", Linger: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()

	record := func(key string, size int) *kgo.Record {
		r := &kgo.Record{Topic: "small", Key: []byte(key), Headers: []kgo.RecordHeader{{Key: "idempotency_key", Value: []byte(key)}}}
		r.Value = []byte(strings.Repeat("x", size-kafka.RecordSize(r)))
		if got := kafka.RecordSize(r); got != size {
			t.Fatalf("RecordSize = %d, want %d", got, size)
		}
		return r
	}

	atLimit := record("at-limit", limit)
	if err := k.CheckSize(atLimit); err != nil {
		t.Fatalf("CheckSize(record of RecordSize %d = the limit) = %v, want nil", limit, err)
	}
	if err := produceOne(t, k, atLimit); err != nil {
		t.Errorf("the broker refused a record CheckSize let through: %v (RecordSize must not underestimate)", err)
	}

	over := record("over", limit+1)
	err = k.CheckSize(over)
	if !errors.Is(err, kafka.ErrRecordTooLarge) || !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("CheckSize(limit+1) = %v, want ErrRecordTooLarge wrapping MESSAGE_TOO_LARGE", err)
	}
	if kind, class := kafka.Classify(err); kind != sink.Record || class != "MESSAGE_TOO_LARGE" {
		t.Errorf("Classify(%v) = %s, %q; want record, MESSAGE_TOO_LARGE", err, kind, class)
	}
	for _, w := range []string{`"small"`, fmt.Sprint(limit)} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("CheckSize error %q does not name %s", err, w)
		}
	}

	// Produce runs the pre-check: the event fails at once, nothing is sent.
	ev := &outbox.Event{IdempotencyKey: "big-event", Payload: []byte(`"` + strings.Repeat("y", limit) + `"`)}
	ch := make(chan error, 1)
	k.Produce(ev, sink.AckFunc(func(_ sink.Result, err error) { ch <- err }))
	select {
	case err := <-ch:
		if !errors.Is(err, kafka.ErrRecordTooLarge) {
			t.Errorf("Produce of an oversized event: %v, want ErrRecordTooLarge", err)
		}
	default:
		t.Fatal("Produce of an oversized event did not fail at once")
	}
	if err := k.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, sent := sizes.get("big-event"); sent {
		t.Error("the oversized event reached the broker")
	}

	// Config.MaxMessageBytes takes precedence over the topic.
	k2, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs(), DefaultTopic: "small", MaxMessageBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer k2.Close()
	if err := k2.CheckSize(record("cfg-ok", 1000)); err != nil {
		t.Errorf("CheckSize(1000) with MaxMessageBytes 1000 = %v", err)
	}
	if err := k2.CheckSize(record("cfg-over", 1001)); !errors.Is(err, kafka.ErrRecordTooLarge) {
		t.Errorf("CheckSize(1001) with MaxMessageBytes 1000 = %v, want ErrRecordTooLarge", err)
	}
}

// TestRecordSizeIsAnUpperBound: for records of every shape (varint length
// boundaries, many headers, empty and nil values), RecordSize is at least
// the size of the uncompressed one-record batch the client really sends.
func TestRecordSizeIsAnUpperBound(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "sizes"))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	defer c.Close()
	sizes := &batchSizes{n: map[string]int{}}
	c.ControlKey(int16(kmsg.Produce), sizes.control)
	k, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs(), DefaultTopic: "sizes", Compression: "none"})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()

	headerSets := map[string][]kgo.RecordHeader{"h0": nil, "h1": {{Key: "a", Value: []byte("b")}}}
	var many []kgo.RecordHeader
	for i := range 40 {
		many = append(many, kgo.RecordHeader{Key: fmt.Sprintf("header-%d", i), Value: []byte(strings.Repeat("v", i*7))})
	}
	headerSets["h40"] = many
	for hname, hs := range headerSets {
		for _, n := range []int{-1, 0, 1, 63, 64, 127, 128, 8191, 8192, 16383, 16384, 300_000} {
			key := fmt.Sprintf("%s-v%d", hname, n)
			r := &kgo.Record{Topic: "sizes", Key: []byte(key), Headers: hs}
			if n >= 0 {
				r.Value = []byte(strings.Repeat("z", n))
			}
			est := kafka.RecordSize(r)
			if err := produceOne(t, k, r); err != nil {
				t.Fatalf("produce %s: %v", key, err)
			}
			got, ok := sizes.get(key)
			if !ok {
				t.Fatalf("no batch seen for %s", key)
			}
			if est < got {
				t.Errorf("%s: RecordSize = %d, the batch sent is %d bytes", key, est, got)
			}
		}
	}
}

// When the topic's max.message.bytes cannot be read (say the principal may
// not DESCRIBE_CONFIGS), CheckSize fails with ErrLimitUnknown naming the
// fix (never a guessed limit that could quarantine a legal record). It must
// not ask the broker again for every record: CheckSize runs on the
// replication goroutine, so a round trip per event would throttle the
// whole stream to the broker's latency.
func TestCheckSizeDoesNotDescribePerRecordWhenDescribeFails(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "denied"))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	defer c.Close()
	var mu sync.Mutex
	describes := 0
	c.ControlKey(int16(kmsg.DescribeConfigs), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		mu.Lock()
		describes++
		mu.Unlock()
		return failedDescribe(kreq, kerr.TopicAuthorizationFailed.Code), nil, true
	})
	k, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs(), DefaultTopic: "denied"})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	for i := range 20 {
		r := &kgo.Record{Topic: "denied", Key: []byte(fmt.Sprint(i)), Value: []byte("{}")}
		err := k.CheckSize(r)
		if !errors.Is(err, kafka.ErrLimitUnknown) || !strings.Contains(err.Error(), "kafka.max_message_bytes") {
			t.Fatalf("CheckSize = %v, want ErrLimitUnknown naming kafka.max_message_bytes", err)
		}
		if kind, class := kafka.Classify(err); kind != sink.Destination || class != "TOPIC_AUTHORIZATION_FAILED" {
			t.Fatalf("Classify(%v) = %s %s, want destination TOPIC_AUTHORIZATION_FAILED (an authorization to grant, never quarantined)", err, kind, class)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if describes > 2 {
		t.Errorf("20 CheckSize calls sent %d DescribeConfigs requests: the failed lookup is retried per record", describes)
	}
}
