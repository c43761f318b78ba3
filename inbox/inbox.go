package inbox

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Config configures an Inbox.
type Config struct {
	// Group names the consumer whose effects are recorded: normally the
	// Kafka consumer group. Required. Two groups apply every event once
	// each; one group, however many processes it runs in, once.
	Group string
	// KeyEveryEvent writes a key row for every applied record, not only
	// for the records the watermark cannot decide. Default false. Turn it
	// on when walpost recover may re-send rows this group already applied
	// from their first send (its margin): those come back with a new
	// commit LSN and the walpost_recovered header, and only a key row of
	// the first application recognises them. It costs a row per event,
	// pruned after KeepFor.
	KeyEveryEvent bool
	// KeepFor is how long Prune keeps a key row; 0 (the default) keeps
	// them for ever. It must exceed the longest time in which a record
	// decided by a key row can be delivered again: the topic's
	// retention.ms (a group reset to the earliest offset reads everything
	// again), and the time within which a poison replay or a recover may be
	// run again over the same rows (doc.go, "Retention").
	KeepFor time.Duration
}

// Inbox applies each event's effect once per consumer group, in the
// caller's transaction. It holds no connection and is safe for concurrent
// use.
type Inbox struct {
	cfg Config
}

// New checks cfg and returns the inbox of cfg.Group.
func New(cfg Config) (*Inbox, error) {
	if cfg.Group == "" {
		return nil, errors.New("inbox: Config.Group is required")
	}
	if cfg.KeepFor < 0 {
		return nil, fmt.Errorf("inbox: Config.KeepFor %s is negative", cfg.KeepFor)
	}
	return &Inbox{cfg: cfg}, nil
}

// Group returns the consumer group the inbox records.
func (in *Inbox) Group() string { return in.cfg.Group }

// Apply runs effect in tx unless rec was applied before by this group, and
// records rec as applied in tx. applied reports whether effect ran. It
// never begins, commits or rolls back tx: the effect and the record of it
// are committed together by the caller, or not at all. After an error,
// from the inbox or from effect, roll tx back.
func (in *Inbox) Apply(ctx context.Context, tx pgx.Tx, rec *kgo.Record, effect func(ctx context.Context, tx pgx.Tx) error) (applied bool, err error) {
	n, err := in.run(ctx, pgxQuerier{tx}, []*kgo.Record{rec}, func([]*kgo.Record) error { return effect(ctx, tx) })
	return n == 1, err
}

// ApplySQL is Apply through database/sql. The driver must take
// PostgreSQL's $n placeholders (pgx's stdlib, lib/pq).
func (in *Inbox) ApplySQL(ctx context.Context, tx *sql.Tx, rec *kgo.Record, effect func(ctx context.Context, tx *sql.Tx) error) (applied bool, err error) {
	n, err := in.run(ctx, sqlQuerier{tx}, []*kgo.Record{rec}, func([]*kgo.Record) error { return effect(ctx, tx) })
	return n == 1, err
}

// ApplyBatch decides every record of recs, in order (records of one
// partition in their offset order), and calls effect once with those not
// applied before, unless there are none; applied is how many. One
// statement locks each partition's watermark (in topic and partition
// order, so concurrent batches do not deadlock) and one writes it back.
func (in *Inbox) ApplyBatch(ctx context.Context, tx pgx.Tx, recs []*kgo.Record, effect func(ctx context.Context, tx pgx.Tx, fresh []*kgo.Record) error) (applied int, err error) {
	return in.run(ctx, pgxQuerier{tx}, recs, func(fresh []*kgo.Record) error { return effect(ctx, tx, fresh) })
}

// ApplyBatchSQL is ApplyBatch through database/sql.
func (in *Inbox) ApplyBatchSQL(ctx context.Context, tx *sql.Tx, recs []*kgo.Record, effect func(ctx context.Context, tx *sql.Tx, fresh []*kgo.Record) error) (applied int, err error) {
	return in.run(ctx, sqlQuerier{tx}, recs, func(fresh []*kgo.Record) error { return effect(ctx, tx, fresh) })
}

type topicPartition struct {
	topic     string
	partition int32
}

// run is every Apply: read the records, lock the watermarks, decide each
// record, run the effect on the new ones, write the watermarks back.
func (in *Inbox) run(ctx context.Context, q querier, recs []*kgo.Record, effect func([]*kgo.Record) error) (int, error) {
	evs := make([]event, len(recs))
	for i, r := range recs {
		if r == nil {
			return 0, &RecordError{Offset: -1, Reason: "nil record"}
		}
		ev, err := parse(r)
		if err != nil {
			return 0, err
		}
		evs[i] = ev
	}
	marks, err := in.lockAll(ctx, q, evs)
	if err != nil {
		return 0, err
	}
	fresh, err := in.decide(ctx, q, evs, marks)
	if err != nil {
		return 0, err
	}
	if len(fresh) > 0 {
		if err := effect(fresh); err != nil {
			return 0, err
		}
	}
	for tp, m := range marks {
		if err := in.store(ctx, q, tp, m); err != nil {
			return 0, err
		}
	}
	return len(fresh), nil
}

// lockAll locks the watermark row of every partition of evs, creating the
// missing ones, in topic and partition order.
func (in *Inbox) lockAll(ctx context.Context, q querier, evs []event) (map[topicPartition]*mark, error) {
	var tps []topicPartition
	marks := map[topicPartition]*mark{}
	for _, ev := range evs {
		tp := topicPartition{ev.rec.Topic, ev.rec.Partition}
		if _, ok := marks[tp]; !ok {
			marks[tp] = nil
			tps = append(tps, tp)
		}
	}
	slices.SortFunc(tps, func(a, b topicPartition) int {
		return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
	})
	for _, tp := range tps {
		m, err := in.lock(ctx, q, tp)
		if err != nil {
			return nil, err
		}
		marks[tp] = m
	}
	return marks, nil
}

const (
	lockSQL = `SELECT commit_lsn::text, array_to_json(keys)::text, next_offset FROM inbox_watermark
		WHERE consumer_group = $1 AND topic = $2 AND partition = $3 FOR UPDATE`
	createSQL = `INSERT INTO inbox_watermark (consumer_group, topic, partition) VALUES ($1, $2, $3)
		ON CONFLICT DO NOTHING`
	storeSQL = `UPDATE inbox_watermark SET commit_lsn = $4::pg_lsn, keys = ARRAY(SELECT jsonb_array_elements_text($5::jsonb)),
		next_offset = $6, updated_at = now() WHERE consumer_group = $1 AND topic = $2 AND partition = $3`
	storeOffsetSQL = `UPDATE inbox_watermark SET next_offset = $4, updated_at = now()
		WHERE consumer_group = $1 AND topic = $2 AND partition = $3`
	keySQL = `INSERT INTO inbox_key (consumer_group, topic, idempotency_key) VALUES ($1, $2, $3)
		ON CONFLICT DO NOTHING`
	keysSQL = `INSERT INTO inbox_key (consumer_group, topic, idempotency_key)
		SELECT $1, $2, k FROM jsonb_array_elements_text($3::jsonb) AS k
		ON CONFLICT DO NOTHING RETURNING idempotency_key`
)

// lock reads and locks tp's watermark, creating it at LSN 0/0.
func (in *Inbox) lock(ctx context.Context, q querier, tp topicPartition) (*mark, error) {
	for attempt := 0; ; attempt++ {
		var lsn, keys string
		m := &mark{}
		err := q.queryRow(ctx, lockSQL, in.cfg.Group, tp.topic, tp.partition).Scan(&lsn, &keys, &m.nextOffset)
		if isNoRows(err) && attempt == 0 {
			if _, err := q.exec(ctx, createSQL, in.cfg.Group, tp.topic, tp.partition); err != nil {
				return nil, fmt.Errorf("inbox: create the watermark of %s/%d: %w", tp.topic, tp.partition, err)
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("inbox: lock the watermark of %s/%d: %w", tp.topic, tp.partition, err)
		}
		l, err := ParseLSN(lsn)
		if err != nil {
			return nil, fmt.Errorf("inbox: watermark of %s/%d: %w", tp.topic, tp.partition, err)
		}
		m.lsn = l
		if err := json.Unmarshal([]byte(keys), &m.keys); err != nil {
			return nil, fmt.Errorf("inbox: watermark keys of %s/%d: %w", tp.topic, tp.partition, err)
		}
		return m, nil
	}
}

// decide runs the rules over evs in order and returns the records to
// apply. The key table is asked only for what the watermark cannot
// decide.
func (in *Inbox) decide(ctx context.Context, q querier, evs []event, marks map[topicPartition]*mark) ([]*kgo.Record, error) {
	fresh := make([]*kgo.Record, 0, len(evs))
	var ordered []int // indexes into fresh of ordered records (KeyEveryEvent)
	seen := map[topicKey]struct{}{}
	for i := range evs {
		ev := &evs[i]
		tp := topicPartition{ev.rec.Topic, ev.rec.Partition}
		m := marks[tp]
		v := m.decide(ev)
		if v == lookup {
			v = skip
			if _, dup := seen[topicKey{tp.topic, ev.key}]; !dup {
				n, err := q.exec(ctx, keySQL, in.cfg.Group, tp.topic, ev.key)
				if err != nil {
					return nil, fmt.Errorf("inbox: record key %q of %s: %w", ev.key, tp.topic, err)
				}
				if n == 1 {
					v = apply
				}
			}
		} else if v == apply {
			m.advance(ev)
			if in.cfg.KeyEveryEvent {
				ordered = append(ordered, len(fresh))
			}
		}
		if v == apply {
			seen[topicKey{tp.topic, ev.key}] = struct{}{}
			fresh = append(fresh, ev.rec)
		}
		m.handled(ev.rec.Offset)
	}
	if len(ordered) > 0 {
		return in.keyEvery(ctx, q, fresh, ordered)
	}
	return fresh, nil
}

type topicKey struct{ topic, key string }

// keyEvery writes the key rows of the watermark's fresh records
// (Config.KeyEveryEvent) and drops from fresh those whose key was applied
// before as a recovered or replayed record.
func (in *Inbox) keyEvery(ctx context.Context, q querier, fresh []*kgo.Record, ordered []int) ([]*kgo.Record, error) {
	byTopic := map[string][]string{}
	keyOf := make(map[int]string, len(ordered))
	for _, i := range ordered {
		ev, _ := parse(fresh[i]) // parsed before
		byTopic[ev.rec.Topic] = append(byTopic[ev.rec.Topic], ev.key)
		keyOf[i] = ev.key
	}
	inserted := map[topicKey]bool{}
	for topic, keys := range byTopic {
		b, _ := json.Marshal(keys)
		got, err := q.queryStrings(ctx, keysSQL, in.cfg.Group, topic, string(b))
		if err != nil {
			return nil, fmt.Errorf("inbox: record the keys of %s: %w", topic, err)
		}
		for _, k := range got {
			inserted[topicKey{topic, k}] = true
		}
	}
	out := fresh[:0]
	j := 0
	for i, r := range fresh {
		if j < len(ordered) && ordered[j] == i {
			j++
			if !inserted[topicKey{r.Topic, keyOf[i]}] {
				continue // applied before as a keyed record
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// store writes m back if it moved.
func (in *Inbox) store(ctx context.Context, q querier, tp topicPartition, m *mark) error {
	if !m.changed {
		return nil
	}
	var err error
	if m.keysMoved() {
		keys, _ := json.Marshal(m.keys)
		_, err = q.exec(ctx, storeSQL, in.cfg.Group, tp.topic, tp.partition, m.lsn.String(), string(keys), m.nextOffset)
	} else {
		_, err = q.exec(ctx, storeOffsetSQL, in.cfg.Group, tp.topic, tp.partition, m.nextOffset)
	}
	if err != nil {
		return fmt.Errorf("inbox: write the watermark of %s/%d: %w", tp.topic, tp.partition, err)
	}
	return nil
}

func isNoRows(err error) bool {
	return errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows)
}
