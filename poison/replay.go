package poison

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/sink"
)

// CreatedAtHeader is the created_at header of the row's record:
// CreatedAtText, or CreatedAt rendered the same way when the row was not
// read by List.
func (r Row) CreatedAtHeader() string {
	if r.CreatedAtText != "" {
		return r.CreatedAtText
	}
	return string(outbox.AppendTime(nil, r.CreatedAt.UTC()))
}

// Event rebuilds the event of a poison row for a replay: the original key,
// payload (nil for a NULL one), headers and partition key, Replayed set
// (so its record carries replayed_from_poison), and the replay time as
// its commit time.
func Event(r Row) *outbox.Event {
	ev := &outbox.Event{
		ID:             r.OutboxID,
		IdempotencyKey: r.IdempotencyKey,
		Payload:        []byte(r.Payload),
		CreatedAt:      r.CreatedAtHeader(),
		Topic:          r.Topic,
		CommitTime:     time.Now(),
		Replayed:       true,
	}
	if r.PayloadNull {
		ev.Payload = nil
	}
	if r.PartitionKey != nil {
		ev.PartitionKey, ev.HasPartition = *r.PartitionKey, true
	}
	if r.EventType != nil {
		ev.EventType = *r.EventType
	}
	if r.Headers != nil {
		ev.Headers = []byte(*r.Headers)
	}
	ev.CommitLSN, _ = pglogrepl.ParseLSN(r.CommitLSN)
	return ev
}

// ReplayResult counts what a replay did.
type ReplayResult struct {
	Replayed, Failed int
	Keys             []string // replayed keys, in order
	Errors           map[string]string
}

// Replayer re-produces poison rows through a sink (walpost's idempotent
// Kafka producer).
type Replayer struct {
	Store  *Store
	Sink   sink.Sink
	Logger *slog.Logger
	// Out receives one line per row (may be nil).
	Out func(line string)
}

// Replay re-produces rows in created_at order, one at a time. A replayed
// row gets replayed_at and replay_count; a row that fails again keeps its
// place and gets the new error. Rows are never deleted.
func (p *Replayer) Replay(ctx context.Context, rows []Row, dryRun bool) (ReplayResult, error) {
	res := ReplayResult{Errors: map[string]string{}}
	out := p.Out
	if out == nil {
		out = func(string) {}
	}
	for _, row := range rows {
		topic := row.Topic
		if topic == "" {
			// The row's topic column was NULL under a topic template:
			// its record goes to kafka.topic, as the stream sent it.
			topic = "kafka.topic"
		}
		if dryRun {
			out(fmt.Sprintf("would replay %s to %s (poisoned %s: %s)", row.IdempotencyKey, topic, row.PoisonedAt.UTC().Format(time.RFC3339), row.ErrorClass))
			continue
		}
		err := p.replayOne(ctx, row)
		if err != nil {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			_, class := sink.KindOf(err)
			res.Failed++
			res.Errors[row.IdempotencyKey] = err.Error()
			out(fmt.Sprintf("FAILED %s to %s: %v", row.IdempotencyKey, topic, err))
			if merr := p.Store.MarkFailed(ctx, row, err.Error(), class); merr != nil {
				return res, merr
			}
			continue
		}
		if err := p.Store.MarkReplayed(ctx, row); err != nil {
			return res, fmt.Errorf("%s was produced but could not be marked replayed: %w", row.IdempotencyKey, err)
		}
		res.Replayed++
		res.Keys = append(res.Keys, row.IdempotencyKey)
		out(fmt.Sprintf("replayed %s to %s", row.IdempotencyKey, topic))
	}
	return res, nil
}

func (p *Replayer) replayOne(ctx context.Context, row Row) error {
	return sink.ProduceSync(ctx, p.Sink, Event(row))
}
