package inbox

import (
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
// record, run the effect on the new ones, write the watermarks back. Three
// statements whatever the batch holds (a fourth when the key table is
// asked, two more the first time a partition is seen).
func (in *Inbox) run(ctx context.Context, q querier, recs []*kgo.Record, effect func([]*kgo.Record) error) (int, error) {
	n, _, err := in.runMarks(ctx, q, recs, effect)
	return n, err
}

// runMarks is run, also returning the watermarks as written.
func (in *Inbox) runMarks(ctx context.Context, q querier, recs []*kgo.Record, effect func([]*kgo.Record) error) (int, map[topicPartition]*mark, error) {
	evs, err := parseAll(recs)
	if err != nil {
		return 0, nil, err
	}
	marks, err := in.lockAll(ctx, q, evs)
	if err != nil {
		return 0, nil, err
	}
	fresh, err := in.finish(ctx, q, in.plan(evs, marks))
	if err != nil {
		return 0, nil, err
	}
	if len(fresh) > 0 {
		if err := effect(fresh); err != nil {
			return 0, nil, err
		}
	}
	if err := in.storeAll(ctx, q, marks); err != nil {
		return 0, nil, err
	}
	return len(fresh), marks, nil
}

// parseAll reads every record before anything is sent.
func parseAll(recs []*kgo.Record) ([]event, error) {
	return parseAllInto(nil, recs)
}

// parseAllInto is parseAll reusing buf's array when it is large enough.
func parseAllInto(buf []event, recs []*kgo.Record) ([]event, error) {
	evs := slices.Grow(buf[:0], len(recs))[:len(recs)]
	clear(evs[len(recs):cap(evs)]) // an earlier, larger batch's records: not kept alive
	for i, r := range recs {
		if r == nil {
			return nil, &RecordError{Offset: -1, Reason: "nil record"}
		}
		if err := parseInto(&evs[i], r); err != nil {
			return nil, err
		}
	}
	return evs, nil
}

// wmJSON is a watermark as the statements exchange it.
type wmJSON struct {
	Topic     string   `json:"t"`
	Partition int32    `json:"p"`
	LSN       string   `json:"l,omitempty"`
	Keys      []string `json:"k,omitempty"`
	Next      int64    `json:"n"`
}

const (
	// lockSQL locks the watermark rows of the partitions in $2, in topic
	// and partition order (so that concurrent batches do not deadlock).
	lockSQL = `SELECT w.topic, w.partition, w.commit_lsn::text, array_to_json(w.keys)::text, w.next_offset
		FROM inbox_watermark w JOIN jsonb_to_recordset($2::jsonb) AS x(t text, p int) ON w.topic = x.t AND w.partition = x.p
		WHERE w.consumer_group = $1 ORDER BY w.topic, w.partition FOR UPDATE OF w`
	createSQL = `INSERT INTO inbox_watermark (consumer_group, topic, partition)
		SELECT $1, x.t, x.p FROM jsonb_to_recordset($2::jsonb) AS x(t text, p int) ON CONFLICT DO NOTHING`
	storeSQL = `UPDATE inbox_watermark w SET commit_lsn = coalesce(x.l::pg_lsn, w.commit_lsn),
		keys = CASE WHEN x.l IS NULL THEN w.keys ELSE ARRAY(SELECT jsonb_array_elements_text(x.k)) END,
		next_offset = x.n, updated_at = now()
		FROM jsonb_to_recordset($2::jsonb) AS x(t text, p int, l text, k jsonb, n bigint)
		WHERE w.consumer_group = $1 AND w.topic = x.t AND w.partition = x.p`
	keysSQL = `INSERT INTO inbox_key (consumer_group, topic, idempotency_key)
		SELECT $1, x.t, x.k FROM jsonb_to_recordset($2::jsonb) AS x(t text, k text)
		ON CONFLICT DO NOTHING RETURNING topic, idempotency_key`
)

// lockAll locks the watermark row of every partition of evs, creating the
// missing ones at LSN 0/0.
func (in *Inbox) lockAll(ctx context.Context, q querier, evs []event) (map[topicPartition]*mark, error) {
	marks := map[topicPartition]*mark{}
	var want []wmJSON
	for _, ev := range evs {
		tp := topicPartition{ev.rec.Topic, ev.rec.Partition}
		if _, ok := marks[tp]; !ok {
			marks[tp] = nil
			want = append(want, wmJSON{Topic: tp.topic, Partition: tp.partition})
		}
	}
	arg, err := json.Marshal(want)
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		found := 0
		err := q.queryEach(ctx, lockSQL, []any{in.cfg.Group, string(arg)}, func(scan func(...any) error) error {
			var tp topicPartition
			var lsn, keys string
			m := &mark{}
			if err := scan(&tp.topic, &tp.partition, &lsn, &keys, &m.nextOffset); err != nil {
				return err
			}
			l, err := ParseLSN(lsn)
			if err != nil {
				return err
			}
			m.lsn = l
			if err := json.Unmarshal([]byte(keys), &m.keys); err != nil {
				return err
			}
			marks[tp] = m
			found++
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("inbox: lock the watermarks: %w", err)
		}
		if found == len(want) {
			return marks, nil
		}
		if attempt == 1 {
			return nil, fmt.Errorf("inbox: %d of %d watermark rows found after creating them (isolation level above READ COMMITTED?)", found, len(want))
		}
		if _, err := q.exec(ctx, createSQL, in.cfg.Group, string(arg)); err != nil {
			return nil, fmt.Errorf("inbox: create the watermarks: %w", err)
		}
	}
}

// plan is a batch decided by the watermarks, before the key table.
type plan struct {
	evs      []event
	verdicts []verdict
	cands    []int // what the key table decides
}

// plan runs the rules over evs in order, moving marks. The key table is
// asked (finish) only for what the watermark cannot decide, and with
// KeyEveryEvent for what it applies.
func (in *Inbox) plan(evs []event, marks map[topicPartition]*mark) *plan {
	verdicts := make([]verdict, len(evs))
	var cands []int
	var seen map[topicKey]struct{} // keys sent to the key table
	var tp topicPartition
	var m *mark
	for i := range evs {
		ev := &evs[i]
		if m == nil || ev.rec.Partition != tp.partition || ev.rec.Topic != tp.topic {
			tp = topicPartition{ev.rec.Topic, ev.rec.Partition}
			m = marks[tp]
		}
		v := m.decide(ev)
		if v == apply {
			m.advance(ev)
		}
		if v == lookup || (v == apply && in.cfg.KeyEveryEvent) {
			// The key table decides, once per key of the batch.
			if seen == nil {
				seen = map[topicKey]struct{}{}
			}
			tk := topicKey{ev.rec.Topic, ev.keyString()}
			if _, dup := seen[tk]; dup {
				v = skip
			} else {
				seen[tk] = struct{}{}
				cands = append(cands, i)
				v = lookup
			}
		}
		verdicts[i] = v
		m.handled(ev.rec.Offset)
	}
	for _, m := range marks {
		m.settle()
	}
	return &plan{evs: evs, verdicts: verdicts, cands: cands}
}

// finish asks the key table, in one statement, and returns the records
// to apply.
func (in *Inbox) finish(ctx context.Context, q querier, p *plan) ([]*kgo.Record, error) {
	var inserted map[topicKey]bool
	if len(p.cands) > 0 {
		arg, err := keysArg(p)
		if err != nil {
			return nil, err
		}
		inserted = make(map[topicKey]bool, len(p.cands))
		if err := q.queryEach(ctx, keysSQL, []any{in.cfg.Group, string(arg)}, keyRow(inserted)); err != nil {
			return nil, fmt.Errorf("inbox: record %d keys: %w", len(p.cands), err)
		}
	}
	return p.resolve(inserted), nil
}

// resolve settles the key table's candidates, those in inserted new and
// the others applied before, and returns the records to apply.
func (p *plan) resolve(inserted map[topicKey]bool) []*kgo.Record {
	evs, verdicts := p.evs, p.verdicts
	for _, i := range p.cands {
		verdicts[i] = skip
		if inserted[topicKey{evs[i].rec.Topic, evs[i].keyString()}] {
			verdicts[i] = apply
		}
	}
	fresh := make([]*kgo.Record, 0, len(evs))
	for i, v := range verdicts {
		if v == apply {
			fresh = append(fresh, evs[i].rec)
		}
	}
	return fresh
}

type topicKey struct{ topic, key string }

// keysArg is keysSQL's $2: the key rows of the plan's candidates.
func keysArg(p *plan) ([]byte, error) {
	type row struct {
		T string `json:"t"`
		K string `json:"k"`
	}
	rows := make([]row, len(p.cands))
	for j, i := range p.cands {
		rows[j] = row{p.evs[i].rec.Topic, p.evs[i].keyString()}
	}
	return json.Marshal(rows)
}

// keyRow reads one of keysSQL's rows, a key it inserted, into inserted.
func keyRow(inserted map[topicKey]bool) func(scan func(...any) error) error {
	return func(scan func(...any) error) error {
		var tk topicKey
		if err := scan(&tk.topic, &tk.key); err != nil {
			return err
		}
		inserted[tk] = true
		return nil
	}
}

// scanKeys reads keysSQL's rows: the keys it inserted.
func scanKeys(rs pgx.Rows) (map[topicKey]bool, error) {
	defer rs.Close()
	inserted := map[topicKey]bool{}
	row := keyRow(inserted)
	for rs.Next() {
		if err := row(rs.Scan); err != nil {
			return nil, err
		}
	}
	return inserted, rs.Err()
}

// storeAll writes back the watermarks that moved, in one statement.
func (in *Inbox) storeAll(ctx context.Context, q querier, marks map[topicPartition]*mark) error {
	var rows []wmJSON
	for tp, m := range marks {
		if !m.changed {
			continue
		}
		r := wmJSON{Topic: tp.topic, Partition: tp.partition, Next: m.nextOffset}
		if m.keysMoved() {
			r.LSN, r.Keys = m.lsn.String(), m.keys
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return nil
	}
	arg, err := json.Marshal(rows)
	if err != nil {
		return err
	}
	if _, err := q.exec(ctx, storeSQL, in.cfg.Group, string(arg)); err != nil {
		return fmt.Errorf("inbox: write the watermarks: %w", err)
	}
	return nil
}
