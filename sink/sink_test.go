package sink_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/sink"
)

func TestKindOf(t *testing.T) {
	tests := []struct {
		err   error
		kind  sink.Kind
		class string
	}{
		{nil, sink.Transient, ""},
		{&sink.Error{Kind: sink.Record, Class: "MESSAGE_TOO_LARGE", Err: errors.New("too large")}, sink.Record, "MESSAGE_TOO_LARGE"},
		{fmt.Errorf("wrapped: %w", &sink.Error{Kind: sink.Destination, Class: "TOPIC_AUTHORIZATION_FAILED", Err: errors.New("denied")}), sink.Destination, "TOPIC_AUTHORIZATION_FAILED"},
		{context.Canceled, sink.Transient, "CLIENT"},
		{fmt.Errorf("wait: %w", context.DeadlineExceeded), sink.Transient, "CLIENT"},
		{errors.New("unclassified"), sink.Unknown, "UNKNOWN"},
	}
	for _, tt := range tests {
		kind, class := sink.KindOf(tt.err)
		if kind != tt.kind || class != tt.class {
			t.Errorf("KindOf(%v) = %s, %q; want %s, %q", tt.err, kind, class, tt.kind, tt.class)
		}
	}
	cause := errors.New("cause")
	if err := (&sink.Error{Kind: sink.Record, Err: cause}); !errors.Is(err, cause) || err.Error() != "cause" {
		t.Errorf("*sink.Error %q does not unwrap to its cause", err)
	}
}

// TestDiscard: every event is acknowledged exactly once, at once.
func TestDiscard(t *testing.T) {
	n := 0
	ev := &outbox.Event{IdempotencyKey: "k", Topic: "t"}
	sink.Discard.Produce(ev, sink.AckFunc(func(r sink.Result, err error) {
		n++
		if err != nil || r.Topic != "t" || r.Partition != 0 {
			t.Errorf("Acked(%+v, %v), want topic t, partition 0, no error", r, err)
		}
	}))
	if n != 1 {
		t.Fatalf("acked %d times, want once", n)
	}
	if err := sink.Discard.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	sink.Discard.Close()
}

// never is a sink that never reports an outcome.
type never struct{}

func (never) Produce(*outbox.Event, sink.Acker) {}
func (never) Flush(context.Context) error       { return nil }
func (never) Close()                            {}

// failing reports every event failed at once.
type failing struct{ err error }

func (f failing) Produce(_ *outbox.Event, a sink.Acker) { a.Acked(sink.Result{Partition: -1}, f.err) }
func (failing) Flush(context.Context) error             { return nil }
func (failing) Close()                                  {}

func TestProduceSync(t *testing.T) {
	ev := &outbox.Event{IdempotencyKey: "k"}
	if err := sink.ProduceSync(context.Background(), sink.Discard, ev); err != nil {
		t.Fatalf("ProduceSync(Discard) = %v", err)
	}
	want := &sink.Error{Kind: sink.Record, Class: "X", Err: errors.New("refused")}
	if err := sink.ProduceSync(context.Background(), failing{want}, ev); !errors.Is(err, want) {
		t.Fatalf("ProduceSync(failing) = %v, want %v", err, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := sink.ProduceSync(ctx, never{}, ev); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ProduceSync(never) = %v, want the context's error", err)
	}
}
