package kafka

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/walpost/walpost/sink"
)

// ProduceRecord sends a built record as Produce sends an event's (same
// partitioner, same promise), for tests of records of an exact size.
func (k *Sink) ProduceRecord(r *kgo.Record, done func(error)) {
	r.Context = &produced{Context: context.Background(), done: sink.AckFunc(func(_ sink.Result, err error) { done(err) })}
	k.client.Load().Produce(context.Background(), r, promise)
}

// SetLimitIntervals sets how old a read limit may be before it is read
// again (any record; before a record is reported too large) and how soon
// a failed read is repeated.
func SetLimitIntervals(k *Sink, refresh, recheck, retry time.Duration) {
	k.limitRefresh, k.limitRecheck, k.limitRetry = refresh, recheck, retry
}

// ClientLogger is the franz-go client's logger over l.
func ClientLogger(l *slog.Logger) kgo.Logger { return clientLogger{kslog.New(l)} }
