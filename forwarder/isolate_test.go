package forwarder

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	"go.uber.org/goleak"

	"github.com/walpost/walpost/checkpoint"
	"github.com/walpost/walpost/internal/leak"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/poison"
	"github.com/walpost/walpost/sink/kafka"
)

// Fault-injection tests of the Isolator: a real kafka.Sink against kfake, a
// real checkpoint.Tracker, and an in-memory Quarantine. A ControlKey on
// Produce decodes every partition's record batch and decides, per batch,
// whether the broker refuses it. The refusal itself is a one-shot kfake
// Fault on that partition installed from inside the control, so the other
// partitions of the same request are still appended by the broker for real
// (answering the whole request from the control would mean forging their
// answers).

const (
	testTopic   = "events"
	partitions  = 3
	maxAttempts = 3
)

// partitionOf is the partition the sink picks for a record keyed key with
// no partition_key: Kafka's murmur2 over the key.
func partitionOf(key string) int32 {
	return int32(kgo.StickyKeyPartitioner(nil).ForTopic(testTopic).Partition(&kgo.Record{Key: []byte(key)}, partitions))
}

// rule decides the answer to one partition's batch of a produce request:
// nil lets the broker append it. keys are the batch's record keys in order.
type rule func(h *harness, partition int32, keys []string) *kerr.Error

// failKey refuses every batch carrying key with code for its first n
// broker attempts (n < 0: always).
func failKey(key string, n int, code *kerr.Error) rule {
	return func(h *harness, _ int32, keys []string) *kerr.Error {
		if slices.Contains(keys, key) && (n < 0 || h.seen(key) <= n) {
			return code
		}
		return nil
	}
}

// failKeys refuses every batch carrying one of keys with code.
func failKeys(code *kerr.Error, keys ...string) rule {
	return func(_ *harness, _ int32, batch []string) *kerr.Error {
		for _, k := range keys {
			if slices.Contains(batch, k) {
				return code
			}
		}
		return nil
	}
}

// failPartition refuses every batch of partition p with code.
func failPartition(p int32, code *kerr.Error) rule {
	return func(_ *harness, partition int32, _ []string) *kerr.Error {
		if partition == p {
			return code
		}
		return nil
	}
}

// fakeQuarantine records Put entries; the first failFirst Puts fail.
type fakeQuarantine struct {
	mu        sync.Mutex
	failFirst int
	calls     int
	entries   []poison.Entry
	// onPut, when set, runs at the start of every Put (call number from 1).
	onPut func(e poison.Entry, call int)
	// permanent, when set, is every Put's error (after failFirst).
	permanent error
}

func (q *fakeQuarantine) Put(_ context.Context, e poison.Entry) error {
	q.mu.Lock()
	q.calls++
	call := q.calls
	onPut := q.onPut
	q.mu.Unlock()
	if onPut != nil {
		onPut(e, call)
	}
	if call <= q.failFirst {
		return fmt.Errorf("put %d: connection refused (injected)", call)
	}
	if q.permanent != nil {
		return q.permanent
	}
	q.mu.Lock()
	q.entries = append(q.entries, e)
	q.mu.Unlock()
	return nil
}

func (q *fakeQuarantine) Entries() []poison.Entry {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.entries)
}

func (q *fakeQuarantine) Calls() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.calls
}

type harnessOpts struct {
	rule     rule
	failPuts int
	maxRate  int
	// permanent is every Put's error (fakeQuarantine.permanent).
	permanent error
	// recent is isolatorConfig.Recent.
	recent []time.Duration
	// onPoisoned is Config.OnPoisoned.
	onPoisoned func(topic, class string)
	// onOrderViolation is Config.OnOrderViolation.
	onOrderViolation func(topic string, partition int32)
	// wrap, when set, wraps the real tracker given to the Isolator.
	wrap func(eventSettler) eventSettler
	// backoffWait, when set, replaces the Isolator's wait before
	// re-sending a record that failed alone.
	backoffWait func(ctx context.Context, d time.Duration) bool
}

type harness struct {
	t  *testing.T
	c  *kfake.Cluster
	k  *kafka.Sink
	tr *checkpoint.Tracker
	// pause is the stream's hold on reading, which the isolator sets
	// while it settles failed records.
	pause *checkpoint.Pause
	q     *fakeQuarantine
	iso   *isolator

	cancel  context.CancelFunc
	runDone chan struct{}
	runErr  error

	mu      sync.Mutex
	seenN   map[string]int // produce batches that carried each key
	rule    rule
	refused []string // "partition:code" answers injected, for failure messages
}

func newHarness(t *testing.T, o harnessOpts) *harness {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, testTopic))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	h := &harness{t: t, c: c, seenN: map[string]int{}, rule: o.rule, runDone: make(chan struct{})}
	c.ControlKey(int16(kmsg.Produce), h.control)

	k, err := kafka.New(kafka.Config{
		Brokers:      c.ListenAddrs(),
		DefaultTopic: testTopic,
		Compression:  "none",
		Linger:       2 * time.Millisecond,
	})
	if err != nil {
		c.Close()
		t.Fatalf("kafka.New: %v", err)
	}
	h.k = k
	h.tr = checkpoint.New(0, nil)
	h.q = &fakeQuarantine{failFirst: o.failPuts, permanent: o.permanent}
	h.pause = checkpoint.NewPause()
	var tracker eventSettler = settler{h.tr, h.pause}
	if o.wrap != nil {
		tracker = o.wrap(tracker)
	}
	h.iso = newIsolator(isolatorConfig{
		MaxAttempts:      maxAttempts,
		Backoff:          2 * time.Millisecond,
		MaxRate:          o.maxRate,
		DefaultTopic:     testTopic,
		OnPoisoned:       o.onPoisoned,
		OnOrderViolation: o.onOrderViolation,
		RateWindow:       time.Hour,
		Recent:           o.recent,
	}, k, h.q, tracker)
	if o.backoffWait != nil {
		SetBackoffWait(h.iso, o.backoffWait)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() {
		defer close(h.runDone)
		h.runErr = h.iso.Run(ctx)
	}()
	return h
}

// control sees every produce request. It counts the keys of each
// partition's batch and, where the rule refuses a batch, installs a
// one-shot fault for that partition; the request then goes on to the
// broker, which answers that partition with the fault and appends the rest.
func (h *harness) control(kreq kmsg.Request) (kmsg.Response, error, bool) {
	req := kreq.(*kmsg.ProduceRequest)
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			var batch kmsg.RecordBatch
			if err := batch.ReadFrom(rp.Records); err != nil {
				continue // the broker answers CORRUPT_MESSAGE
			}
			recs, err := kfake.BatchRecords(batch)
			if err != nil {
				continue
			}
			keys := make([]string, len(recs))
			h.mu.Lock()
			for i, r := range recs {
				keys[i] = string(r.Key)
				h.seenN[keys[i]]++
			}
			h.mu.Unlock()
			if h.rule == nil {
				continue
			}
			if code := h.rule(h, rp.Partition, keys); code != nil {
				h.mu.Lock()
				h.refused = append(h.refused, fmt.Sprintf("%d:%s%v", rp.Partition, code.Message, keys))
				h.mu.Unlock()
				h.c.Fault(kfake.Fault{
					Keys:       []kmsg.Key{kmsg.Produce},
					Partitions: []int32{rp.Partition},
					Err:        code,
					Count:      1,
				})
			}
		}
	}
	return nil, nil, false
}

// seen is the number of produce batches that carried key so far: the
// broker round trips of that record.
func (h *harness) seen(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seenN[key]
}

// wait waits for Run to return and returns its error.
func (h *harness) wait(d time.Duration) error {
	h.t.Helper()
	select {
	case <-h.runDone:
		return h.runErr
	case <-time.After(d):
		h.t.Fatalf("isolator.Run did not return within %s", d)
		return nil
	}
}

// close stops Run, then the sink, then the cluster.
func (h *harness) close() {
	h.cancel()
	<-h.runDone
	h.k.Close()
	h.c.Close()
}

// txn is one transaction to emit.
type txn struct {
	events []*outbox.Event
	end    pglogrepl.LSN
}

// makeTxns builds n transactions of per events each, keyed k00, k01, … in
// emit order, with growing commit and end LSNs.
func makeTxns(n, per int) ([]txn, []string) {
	var txns []txn
	var keys []string
	for i := range n {
		commit := pglogrepl.LSN(0x10000 * (i + 1))
		x := txn{end: commit + 0x30}
		for j := range per {
			key := fmt.Sprintf("k%02d", len(keys))
			keys = append(keys, key)
			x.events = append(x.events, newEvent(key, i, j, commit))
		}
		txns = append(txns, x)
	}
	return txns, keys
}

// newEvent is event j of transaction i.
func newEvent(key string, i, j int, commit pglogrepl.LSN) *outbox.Event {
	return &outbox.Event{
		ID:             fmt.Sprintf("00000000-0000-0000-0000-%012d", 100*i+j),
		IdempotencyKey: key,
		Payload:        fmt.Appendf(nil, `{"key": %q}`, key),
		CreatedAt:      "2024-05-01 12:00:00.123456+00",
		XID:            uint32(1000 + i),
		CommitLSN:      commit,
		CommitTime:     time.Date(2024, 5, 1, 12, 0, i, 0, time.UTC),
		Seq:            j,
	}
}

// emit opens, fills and seals each transaction, as the replication reader
// does: Open, then Add + Emit per event, then Seal with the end LSN.
func (h *harness) emit(txns []txn) {
	h.t.Helper()
	for i, x := range txns {
		tx, err := h.tr.OpenAt(time.Time{})
		if err != nil {
			h.t.Fatalf("txn %d: Open: %v", i, err)
		}
		for _, ev := range x.events {
			h.iso.Emit(ev, h.tr.Add(tx, ev.Size()))
		}
		if err := h.tr.Seal(tx, x.end); err != nil {
			h.t.Fatalf("txn %d: Seal: %v", i, err)
		}
	}
}

// eventually polls cond until it holds or d has passed.
func eventually(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// waitConfirmed polls until the tracker confirms want.
func (h *harness) waitConfirmed(want pglogrepl.LSN, d time.Duration) {
	h.t.Helper()
	if eventually(d, func() bool { return h.tr.Confirmed() == want }) {
		return
	}
	h.mu.Lock()
	refused := slices.Clone(h.refused)
	h.mu.Unlock()
	h.t.Fatalf("Confirmed() = %s after %s, want %s (quarantined %d, refused batches %v)",
		h.tr.Confirmed(), d, want, len(h.q.Entries()), refused)
}

// consumeAll reads the whole topic back and returns the keys per partition
// in offset order.
func (h *harness) consumeAll() map[int32][]string {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(h.c.ListenAddrs()...),
		kgo.ConsumeTopics(testTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(50*time.Millisecond),
	)
	if err != nil {
		h.t.Fatalf("consumer: %v", err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, testTopic)
	if err != nil {
		h.t.Fatalf("list end offsets: %v", err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	got := map[int32][]string{}
	var n int64
	for n < total {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			h.t.Fatalf("consumed %d of %d records: %v", n, total, ctx.Err())
		}
		if errs := fs.Errors(); len(errs) > 0 {
			h.t.Fatalf("consume: %v", errs)
		}
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = append(got[r.Partition], string(r.Key))
			n++
		})
	}
	return got
}

// checkStream checks what Kafka holds against the emit order: every key
// not in quarantined is on its partition exactly once, quarantined keys
// are absent, and per partition the order is the emit order (INV-3).
func checkStream(t *testing.T, got map[int32][]string, emitted []string, quarantined ...string) {
	t.Helper()
	count := map[string]int{}
	for p, keys := range got {
		for _, k := range keys {
			count[k]++
			if want := partitionOf(k); p != want {
				t.Errorf("key %s on partition %d, want %d", k, p, want)
			}
		}
	}
	want := map[int32][]string{}
	for _, k := range emitted {
		if slices.Contains(quarantined, k) {
			if count[k] != 0 {
				t.Errorf("quarantined key %s is in Kafka %d time(s)", k, count[k])
			}
			continue
		}
		if count[k] != 1 {
			t.Errorf("key %s is in Kafka %d time(s), want exactly once", k, count[k])
		}
		want[partitionOf(k)] = append(want[partitionOf(k)], k)
	}
	for p := range int32(partitions) {
		var first []string
		for _, k := range got[p] {
			if !slices.Contains(first, k) {
				first = append(first, k)
			}
		}
		if !slices.Equal(first, want[p]) {
			t.Errorf("partition %d order:\n got %v\nwant %v", p, first, want[p])
		}
	}
}

// pickKey returns a key with at least two keys of its partition emitted
// before it and two after, so it has neighbours on both sides.
func pickKey(t *testing.T, keys []string) string {
	t.Helper()
	for _, k := range keys[2:] {
		p := partitionOf(k)
		var before, after int
		seenSelf := false
		for _, o := range keys {
			switch {
			case o == k:
				seenSelf = true
			case partitionOf(o) != p:
			case seenSelf:
				after++
			default:
				before++
			}
		}
		if before >= 2 && after >= 2 {
			return k
		}
	}
	t.Fatalf("no key with neighbours on both sides among %v", keys)
	return ""
}

// txnEnd returns the end LSN of the transaction holding key.
func txnEnd(txns []txn, key string) pglogrepl.LSN {
	for _, x := range txns {
		for _, ev := range x.events {
			if ev.IdempotencyKey == key {
				return x.end
			}
		}
	}
	return 0
}

// a. A record refused twice, then taken: delivered once, in its place,
// never quarantined.
func TestIsolatorRecordRefusedTwiceIsRetried(t *testing.T) {
	defer leak.VerifyNone(t, goleak.IgnoreCurrent())
	txns, keys := makeTxns(10, 3)
	chosen := pickKey(t, keys)
	h := newHarness(t, harnessOpts{rule: failKey(chosen, 2, kerr.InvalidRecord)})
	defer h.close()

	h.emit(txns)
	h.waitConfirmed(txns[len(txns)-1].end, 10*time.Second)

	if e := h.q.Entries(); len(e) != 0 {
		t.Fatalf("quarantined %d event(s) (first %q), want none", len(e), e[0].Event.IdempotencyKey)
	}
	if n := h.seen(chosen); n != 3 {
		t.Errorf("%s reached the broker %d time(s), want 3 (two refusals, one success)", chosen, n)
	}
	checkStream(t, h.consumeAll(), keys)
}

// b. A record always refused: quarantined after exactly MaxAttempts broker
// attempts, with its class; its neighbours go on, in order.
func TestIsolatorPermanentRecordFailureIsQuarantined(t *testing.T) {
	defer leak.VerifyNone(t, goleak.IgnoreCurrent())
	txns, keys := makeTxns(10, 3)
	chosen := pickKey(t, keys)
	var mu sync.Mutex
	var poisoned []string
	h := newHarness(t, harnessOpts{
		rule: failKey(chosen, -1, kerr.InvalidRecord),
		onPoisoned: func(topic, class string) {
			mu.Lock()
			poisoned = append(poisoned, topic+"/"+class)
			mu.Unlock()
		},
	})
	defer h.close()

	h.emit(txns)
	h.waitConfirmed(txns[len(txns)-1].end, 10*time.Second)

	e := h.q.Entries()
	if len(e) != 1 {
		t.Fatalf("quarantined %d event(s), want 1", len(e))
	}
	got := e[0]
	if got.Event.IdempotencyKey != chosen || got.Topic != testTopic || got.Attempts != maxAttempts ||
		got.ErrorClass != "INVALID_RECORD" || !strings.Contains(got.LastError, "INVALID_RECORD") {
		t.Errorf("entry = {key %q topic %q attempts %d class %q error %q}, want {%q %q %d INVALID_RECORD …INVALID_RECORD…}",
			got.Event.IdempotencyKey, got.Topic, got.Attempts, got.ErrorClass, got.LastError, chosen, testTopic, maxAttempts)
	}
	if n := h.seen(chosen); n != maxAttempts {
		t.Errorf("%s reached the broker %d time(s), want exactly MaxAttempts = %d", chosen, n, maxAttempts)
	}
	mu.Lock()
	if want := []string{testTopic + "/INVALID_RECORD"}; !slices.Equal(poisoned, want) {
		t.Errorf("OnPoisoned calls = %v, want %v", poisoned, want)
	}
	mu.Unlock()
	checkStream(t, h.consumeAll(), keys, chosen)
}

// a2. Neighbours failed along with a bad record are re-sent at once: only
// the bad record, failing again alone, waits a backoff. One bad record
// among N neighbours costs one backoff wait, not N.
func TestIsolatorNeighboursResentWithoutBackoff(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	txns, keys := makeTxns(10, 3)
	chosen := pickKey(t, keys)
	var mu sync.Mutex
	var waits []time.Duration
	h := newHarness(t, harnessOpts{
		rule: failKey(chosen, -1, kerr.InvalidRecord),
		backoffWait: func(ctx context.Context, d time.Duration) bool {
			mu.Lock()
			waits = append(waits, d)
			mu.Unlock()
			return ctx.Err() == nil
		},
	})
	defer h.close()

	h.emit(txns)
	h.waitConfirmed(txns[len(txns)-1].end, 10*time.Second)

	var neighbours []string
	for _, k := range keys {
		if k != chosen && h.seen(k) >= 2 {
			neighbours = append(neighbours, k)
		}
	}
	if len(neighbours) == 0 {
		t.Fatalf("no record was failed along with %s: the test did not exercise neighbours", chosen)
	}
	mu.Lock()
	got := slices.Clone(waits)
	mu.Unlock()
	// The bad record: attempt 1 in its batch, attempt 2 alone at once,
	// one backoff, attempt 3, quarantined.
	if want := []time.Duration{2 * time.Millisecond}; !slices.Equal(got, want) {
		t.Errorf("backoff waits %v with %d neighbour(s) %v re-sent, want %v (only %s, after failing alone)", got, len(neighbours), neighbours, want, chosen)
	}
	if e := h.q.Entries(); len(e) != 1 || e[0].Event.IdempotencyKey != chosen || e[0].Attempts != maxAttempts {
		t.Fatalf("quarantined %v, want exactly %s after %d attempts", entryKeys(e), chosen, maxAttempts)
	}
	checkStream(t, h.consumeAll(), keys, chosen)
}

// c. The poison table refuses the first three inserts: the watermark stays
// before the poisoned event's transaction until the insert commits, the
// reader is paused and events emitted meanwhile are held (not produced);
// then everything goes on in order and nothing is lost.
func TestIsolatorQuarantineStoreFailureHoldsWatermark(t *testing.T) {
	defer leak.VerifyNone(t, goleak.IgnoreCurrent())
	all, keys := makeTxns(14, 3)
	wave1, wave2 := all[:10], all[10:]
	chosen := pickKey(t, keys[:30])
	end := txnEnd(all, chosen)
	h := newHarness(t, harnessOpts{rule: failKey(chosen, -1, kerr.InvalidRecord), failPuts: 3})
	defer h.close()

	type putView struct {
		confirmed pglogrepl.LSN
		full      bool
		wave2Seen int
	}
	var mu sync.Mutex
	var views []putView
	firstPut := make(chan struct{})
	h.q.onPut = func(_ poison.Entry, call int) {
		v := putView{confirmed: h.tr.Confirmed(), full: h.pause.On()}
		if call > 1 { // wave 2 is emitted after the first Put started
			for _, k := range keys[30:] {
				v.wave2Seen += h.seen(k)
			}
		}
		mu.Lock()
		views = append(views, v)
		mu.Unlock()
		if call == 1 {
			close(firstPut)
		}
	}

	h.emit(wave1)
	select {
	case <-firstPut:
	case <-time.After(10 * time.Second):
		t.Fatal("the poison row was never written")
	}
	// The Isolator is settling: these must be held until it is done.
	h.emit(wave2)
	h.waitConfirmed(all[len(all)-1].end, 10*time.Second)

	if n := h.q.Calls(); n != 4 {
		t.Errorf("Put called %d time(s), want 4 (3 failures, then success)", n)
	}
	mu.Lock()
	for i, v := range views {
		if v.confirmed >= end {
			t.Errorf("Put %d: Confirmed() = %s, at or past the poisoned transaction's end %s before the row committed", i+1, v.confirmed, end)
		}
		if !v.full {
			t.Errorf("Put %d: the tracker is not paused while a failure is settled", i+1)
		}
		if v.wave2Seen != 0 {
			t.Errorf("Put %d: %d record(s) emitted after the failure reached Kafka before it was settled", i+1, v.wave2Seen)
		}
	}
	mu.Unlock()
	// The Isolator unpauses right after releasing the held events, which
	// may be acked first.
	if !eventually(2*time.Second, func() bool { return !h.pause.On() }) {
		t.Errorf("the tracker is still paused after the failure was settled")
	}
	e := h.q.Entries()
	if len(e) != 1 || e[0].Event.IdempotencyKey != chosen {
		t.Fatalf("quarantined %v, want exactly %s", entryKeys(e), chosen)
	}
	checkStream(t, h.consumeAll(), keys, chosen)
}

func entryKeys(es []poison.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Event.IdempotencyKey
	}
	return out
}

// d. A row whose headers cannot be a Kafka header set: INVALID_HEADERS,
// quarantined without ever reaching the broker; neighbours unaffected.
func TestIsolatorInvalidHeadersQuarantinedWithoutBroker(t *testing.T) {
	defer leak.VerifyNone(t, goleak.IgnoreCurrent())
	txns, keys := makeTxns(10, 3)
	chosen := pickKey(t, keys)
	for _, x := range txns {
		for _, ev := range x.events {
			if ev.IdempotencyKey == chosen {
				ev.Headers = []byte(`{"a": 1}`)
			}
		}
	}
	h := newHarness(t, harnessOpts{})
	defer h.close()

	h.emit(txns)
	h.waitConfirmed(txns[len(txns)-1].end, 10*time.Second)

	e := h.q.Entries()
	if len(e) != 1 || e[0].Event.IdempotencyKey != chosen {
		t.Fatalf("quarantined %v, want exactly %s", entryKeys(e), chosen)
	}
	if e[0].ErrorClass != "INVALID_HEADERS" {
		t.Errorf("class = %q, want INVALID_HEADERS", e[0].ErrorClass)
	}
	if !strings.Contains(e[0].LastError, `header "a"`) {
		t.Errorf("last error %q does not name the bad header", e[0].LastError)
	}
	if n := h.seen(chosen); n != 0 {
		t.Errorf("%s reached the broker %d time(s), want 0", chosen, n)
	}
	checkStream(t, h.consumeAll(), keys, chosen)
}

// e. Kafka refuses the destination for one partition: Run ends with a
// *destinationError, nothing is quarantined, and the watermark never
// passes the first refused event.
func TestIsolatorDestinationErrorHalts(t *testing.T) {
	defer leak.VerifyNone(t, goleak.IgnoreCurrent())
	txns, keys := makeTxns(10, 3)
	p := partitionOf(keys[4])
	var firstOnP string
	for _, k := range keys {
		if partitionOf(k) == p {
			firstOnP = k
			break
		}
	}
	limit := txnEnd(txns, firstOnP)
	h := newHarness(t, harnessOpts{rule: failPartition(p, kerr.TopicAuthorizationFailed)})
	defer h.close()

	h.emit(txns)
	err := h.wait(10 * time.Second)
	var de *destinationError
	if !errors.As(err, &de) {
		t.Fatalf("Run = %v, want a *destinationError", err)
	}
	if de.Class != "TOPIC_AUTHORIZATION_FAILED" || de.Topic != testTopic || !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("destinationError{Class %q Topic %q} (%v), want TOPIC_AUTHORIZATION_FAILED on %q", de.Class, de.Topic, err, testTopic)
	}
	if !strings.Contains(err.Error(), "kafka-acls.sh") {
		t.Errorf("error %q does not say how to fix the ACL", err)
	}
	if partitionOf(de.Key) != p {
		t.Errorf("destinationError names %s (partition %d), want an event of partition %d", de.Key, partitionOf(de.Key), p)
	}
	// Whatever else is still acked, the watermark stays before the
	// transaction of the first refused event (INV-1).
	h.k.Close()
	time.Sleep(20 * time.Millisecond)
	if c := h.tr.Confirmed(); c >= limit {
		t.Errorf("Confirmed() = %s, at or past %s, the end of %s's transaction, which Kafka refused", c, limit, firstOnP)
	}
	if e := h.q.Entries(); len(e) != 0 {
		t.Errorf("quarantined %v on a destination failure, want nothing", entryKeys(e))
	}
}

// f. More quarantined events than MaxRate within the window trip the
// breaker.
func TestIsolatorBreakerTrips(t *testing.T) {
	defer leak.VerifyNone(t, goleak.IgnoreCurrent())
	txns, keys := makeTxns(4, 3)
	bad := []string{keys[1], keys[5], keys[9]}
	h := newHarness(t, harnessOpts{rule: failKeys(kerr.InvalidRecord, bad...), maxRate: 2})
	defer h.close()

	h.emit(txns)
	err := h.wait(10 * time.Second)
	if !errors.Is(err, errBreaker) {
		t.Fatalf("Run = %v, want an error wrapping errBreaker", err)
	}
	if got := entryKeys(h.q.Entries()); !slices.Equal(got, bad) {
		t.Errorf("quarantined %v, want %v (in emit order)", got, bad)
	}
}

// f2. The breaker counts the quarantines of earlier sessions (Recent):
// with MaxRate 3 and 2 already within the window, the second quarantine of
// this session trips it (4 > 3); quarantines older than the window are not
// counted.
func TestIsolatorBreakerCountsRecent(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	txns, keys := makeTxns(4, 3)
	bad := []string{keys[1], keys[5], keys[9]}
	h := newHarness(t, harnessOpts{rule: failKeys(kerr.InvalidRecord, bad...), maxRate: 3,
		recent: []time.Duration{2 * time.Hour, 10 * time.Minute, time.Minute}})
	defer h.close()

	h.emit(txns)
	err := h.wait(10 * time.Second)
	if !errors.Is(err, errBreaker) || !strings.Contains(err.Error(), "4 events quarantined") {
		t.Fatalf("Run = %v, want errBreaker with 4 events quarantined (2 recent + 2)", err)
	}
	if got := entryKeys(h.q.Entries()); !slices.Equal(got, bad[:2]) {
		t.Errorf("quarantined %v, want %v", got, bad[:2])
	}
	if c := h.tr.Confirmed(); c >= txnEnd(txns, bad[2]) {
		t.Errorf("Confirmed() = %s, at or past the third bad event's transaction, which was never quarantined", c)
	}
}

// f3. A window already over MaxRate when the session starts trips the
// breaker at the first candidate, before writing its row.
func TestIsolatorBreakerFullWindowWritesNothing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	txns, keys := makeTxns(2, 3)
	h := newHarness(t, harnessOpts{rule: failKeys(kerr.InvalidRecord, keys[2]), maxRate: 2,
		recent: []time.Duration{3 * time.Minute, 2 * time.Minute, time.Minute}})
	defer h.close()

	h.emit(txns)
	if err := h.wait(10 * time.Second); !errors.Is(err, errBreaker) {
		t.Fatalf("Run = %v, want errBreaker", err)
	}
	if n := h.q.Calls(); n != 0 {
		t.Errorf("Put called %d time(s) with the breaker's window already full, want 0", n)
	}
	if c := h.tr.Confirmed(); c >= txnEnd(txns, keys[2]) {
		t.Errorf("Confirmed() = %s, at or past the refused event's transaction", c)
	}
}

// f4. A poison write that fails for good (poison.ErrUnwritable: a value
// the table's types refuse) is tried once, not forever: Run returns the
// error, the event is not confirmed.
func TestIsolatorUnwritablePoisonRowStops(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	txns, keys := makeTxns(10, 3)
	chosen := pickKey(t, keys)
	permanent := &poison.TableError{Table: `"poison_outbox"`, Column: "outbox_id", Key: chosen, Problem: "does not cast", Fix: "ALTER TABLE"}
	h := newHarness(t, harnessOpts{rule: failKey(chosen, -1, kerr.InvalidRecord), permanent: permanent})
	defer h.close()

	h.emit(txns)
	err := h.wait(10 * time.Second)
	if !errors.Is(err, poison.ErrUnwritable) || !strings.Contains(err.Error(), chosen) {
		t.Fatalf("Run = %v, want an error naming %s and wrapping poison.ErrUnwritable", err, chosen)
	}
	if a, _ := Classify(context.Background(), err); a != Fail {
		t.Errorf("Classify = %s, want fail", a)
	}
	if n := h.q.Calls(); n != 1 {
		t.Errorf("Put called %d time(s), want 1 (not retried)", n)
	}
	if c := h.tr.Confirmed(); c >= txnEnd(txns, chosen) {
		t.Errorf("Confirmed() = %s, at or past %s's transaction, which was never quarantined", c, chosen)
	}
}

// gatedTracker blocks Done of one ticket until released: a promise
// goroutine that is slow (GC, a backlog of acks) at one moment.
type gatedTracker struct {
	eventSettler
	mu      sync.Mutex
	gate    *checkpoint.Ticket
	entered chan struct{}
	release chan struct{}
}

func (g *gatedTracker) Done(k checkpoint.Ticket) {
	g.mu.Lock()
	hit := g.gate != nil && *g.gate == k
	g.mu.Unlock()
	if hit {
		close(g.entered)
		<-g.release
	}
	g.eventSettler.Done(k)
}

// INV-3 across a failure, when the failure's promise is late.
// franz-go fails a partition's buffered records at once but reports it
// through the promise goroutine later; an event emitted in between is not
// held, is appended, and lands before the failed record's retry. Here the
// promise goroutine is held up by one slow Done (B, another partition)
// while A (partition p) is refused once and C (partition p, emitted after
// A) is emitted. walpost cannot prevent this (README, delivery
// guarantees); it must detect and report it, and lose nothing.
func TestIsolatorOrderHoldsWhenFailurePromiseIsLate(t *testing.T) {
	defer leak.VerifyNone(t, goleak.IgnoreCurrent())
	_, keys := makeTxns(10, 3)
	var a, b, c string
	for _, k := range keys {
		switch {
		case a == "":
			a = k
		case c == "" && partitionOf(k) == partitionOf(a):
			c = k
		case b == "" && partitionOf(k) != partitionOf(a):
			b = k
		}
	}
	p := partitionOf(a)
	g := &gatedTracker{entered: make(chan struct{}), release: make(chan struct{})}
	var vmu sync.Mutex
	var violations []int32
	h := newHarness(t, harnessOpts{
		rule: failKey(a, 1, kerr.InvalidRecord),
		wrap: func(tr eventSettler) eventSettler { g.eventSettler = tr; return g },
		onOrderViolation: func(_ string, part int32) {
			vmu.Lock()
			violations = append(violations, part)
			vmu.Unlock()
		},
	})
	var once sync.Once
	release := func() { once.Do(func() { close(g.release) }) }
	defer h.close()
	defer release()

	emitOne := func(i int, key string, gate bool) pglogrepl.LSN {
		commit := pglogrepl.LSN(0x10000 * (i + 1))
		tx, err := h.tr.OpenAt(time.Time{})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		ev := newEvent(key, i, 0, commit)
		tk := h.tr.Add(tx, ev.Size())
		if gate {
			g.mu.Lock()
			g.gate = &tk
			g.mu.Unlock()
		}
		h.iso.Emit(ev, tk)
		if err := h.tr.Seal(tx, commit+0x30); err != nil {
			t.Fatalf("Seal: %v", err)
		}
		return commit + 0x30
	}

	emitOne(0, b, true)
	select {
	case <-g.entered: // B is acked; the promise goroutine now waits in Done
	case <-time.After(10 * time.Second):
		t.Fatal("B was never acked")
	}
	emitOne(1, a, false)
	if !eventually(10*time.Second, func() bool { return h.seen(a) >= 1 }) {
		t.Fatal("A never reached the broker")
	}
	time.Sleep(50 * time.Millisecond) // franz-go reads the refusal and fails A
	end := emitOne(2, c, false)
	adm := kadm.NewClient(h.k.Client())
	appended := eventually(10*time.Second, func() bool {
		ends, err := adm.ListEndOffsets(context.Background(), testTopic)
		if err != nil {
			return false
		}
		o, _ := ends.Lookup(testTopic, p)
		return o.Offset >= 1
	})
	t.Logf("C appended while A's failure was unreported: %v", appended)
	release()
	h.waitConfirmed(end, 10*time.Second)
	vmu.Lock()
	got := slices.Clone(violations)
	vmu.Unlock()
	if !appended {
		checkStream(t, h.consumeAll(), []string{b, a, c})
		if len(got) != 0 {
			t.Fatalf("order violation reported %v, but none happened", got)
		}
		return
	}
	if len(got) != 1 || got[0] != p {
		t.Fatalf("order violations reported %v, want exactly one on partition %d", got, p)
	}
	// Nothing lost: all three are in Kafka.
	seen := map[string]bool{}
	for _, keys := range h.consumeAll() {
		for _, k := range keys {
			seen[k] = true
		}
	}
	for _, k := range []string{a, b, c} {
		if !seen[k] {
			t.Fatalf("%s lost", k)
		}
	}
}
