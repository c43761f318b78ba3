package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/sink"
)

// ProduceRecord sends a built record as Produce sends an event's (same
// partitioner, same promise), for tests of records of an exact size.
func (k *Sink) ProduceRecord(r *kgo.Record, done func(error)) {
	r.Context = &produced{Context: context.Background(), done: sink.AckFunc(func(_ sink.Result, err error) { done(err) })}
	k.client.Produce(context.Background(), r, promise)
}
