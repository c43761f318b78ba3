package poison

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walpost/walpost/outbox"
)

// Entry is one quarantined event.
type Entry struct {
	Event      *outbox.Event
	Topic      string // resolved topic
	Attempts   int
	LastError  string
	ErrorClass string
}

// Row is a row of the poison table.
type Row struct {
	IdempotencyKey string    `json:"idempotency_key"`
	OutboxID       string    `json:"outbox_id"`
	Topic          string    `json:"topic"`
	PartitionKey   *string   `json:"partition_key"`
	EventType      *string   `json:"event_type"`
	Payload        string    `json:"payload"`
	Headers        *string   `json:"headers"`
	CreatedAt      time.Time `json:"created_at"` // zero for infinity and -infinity
	// CreatedAtText is created_at as the created_at header renders it
	// (outbox.AppendTime, or "infinity" / "-infinity").
	CreatedAtText string     `json:"created_at_text"`
	Attempts      int        `json:"attempts"`
	LastError     string     `json:"last_error"`
	ErrorClass    string     `json:"error_class"`
	CommitLSN     string     `json:"commit_lsn"`
	PoisonedAt    time.Time  `json:"poisoned_at"`
	ReplayedAt    *time.Time `json:"replayed_at"`
	ReplayCount   int        `json:"replay_count"`
}

// Store writes and reads the poison table over its own pool, separate
// from the replication connection.
type Store struct {
	pool  *pgxpool.Pool
	table string // sanitized identifier
}

// NewStore uses pool and the (optionally schema-qualified) table name.
func NewStore(pool *pgxpool.Pool, table string) *Store {
	return &Store{pool: pool, table: quoteQualified(table)}
}

func quoteQualified(name string) string {
	var parts []string
	start := 0
	for i := 0; i < len(name); i++ {
		if name[i] == '.' {
			parts = append(parts, name[start:i])
			start = i + 1
		}
	}
	parts = append(parts, name[start:])
	return pgx.Identifier(parts).Sanitize()
}

// Put inserts the entry; a row with the same idempotency_key already there
// is kept (ON CONFLICT DO NOTHING). It returns once the insert committed.
func (s *Store) Put(ctx context.Context, e Entry) error {
	ev := e.Event
	var pk, et, headers *string
	if ev.HasPartition {
		pk = &ev.PartitionKey
	}
	if ev.EventType != "" {
		et = &ev.EventType
	}
	if ev.Headers != nil {
		h := string(ev.Headers)
		headers = &h
	}
	var id *string
	if ev.ID != "" {
		id = &ev.ID
	}
	var payload *string
	if ev.Payload != nil {
		p := string(ev.Payload)
		payload = &p
	}
	created := ev.CreatedAt
	if created == "" {
		created = ev.CommitTime.UTC().Format(time.RFC3339Nano)
	}
	_, err := s.pool.Exec(ctx, fmt.Sprintf(`
		INSERT INTO %s (idempotency_key, outbox_id, payload, created_at, topic, partition_key, event_type, headers,
		                attempts, last_error, error_class, commit_lsn)
		VALUES ($1, $2::uuid, $3::jsonb, $4::timestamptz, $5, $6, $7, $8::jsonb, $9, $10, $11, $12::pg_lsn)
		ON CONFLICT (idempotency_key) DO NOTHING`, s.table),
		ev.IdempotencyKey, id, payload, created, e.Topic, pk, et, headers,
		e.Attempts, e.LastError, e.ErrorClass, ev.CommitLSN.String())
	if err != nil {
		return fmt.Errorf("insert into poison table %s: %w", s.table, err)
	}
	return nil
}

// Filter selects rows.
type Filter struct {
	Keys  []string // only these keys; empty means all
	All   bool     // include rows already replayed
	Limit int      // 0 means no limit
}

// List returns rows in created_at order.
func (s *Store) List(ctx context.Context, f Filter) ([]Row, error) {
	q := fmt.Sprintf(`
		SELECT idempotency_key, coalesce(outbox_id::text, ''), topic, partition_key, event_type, coalesce(payload::text, 'null'),
		       headers::text, created_at, attempts, last_error, error_class, commit_lsn::text, poisoned_at, replayed_at, replay_count
		FROM %s
		WHERE ($1::text[] IS NULL OR idempotency_key = ANY($1)) AND ($2 OR replayed_at IS NULL)
		ORDER BY created_at, poisoned_at, idempotency_key`, s.table)
	var keys []string
	if len(f.Keys) > 0 {
		keys = f.Keys
	}
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	rows, err := s.pool.Query(ctx, q, keys, f.All)
	if err != nil {
		return nil, fmt.Errorf("read poison table %s: %w", s.table, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Row, error) {
		var x Row
		// created_at may be infinity, which a time.Time cannot hold.
		var created pgtype.Timestamptz
		err := r.Scan(&x.IdempotencyKey, &x.OutboxID, &x.Topic, &x.PartitionKey, &x.EventType, &x.Payload, &x.Headers,
			&created, &x.Attempts, &x.LastError, &x.ErrorClass, &x.CommitLSN, &x.PoisonedAt, &x.ReplayedAt, &x.ReplayCount)
		x.CreatedAt, x.CreatedAtText = createdAt(created)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("read poison table %s: %w", s.table, err)
	}
	return out, nil
}

// createdAt is the time and header text of a created_at value.
func createdAt(ts pgtype.Timestamptz) (time.Time, string) {
	switch ts.InfinityModifier {
	case pgtype.Infinity:
		return time.Time{}, "infinity"
	case pgtype.NegativeInfinity:
		return time.Time{}, "-infinity"
	}
	return ts.Time, string(outbox.AppendTime(nil, ts.Time.UTC()))
}

// MarkReplayed records a successful replay; the row stays.
func (s *Store) MarkReplayed(ctx context.Context, key string) error {
	tag, err := s.pool.Exec(ctx, fmt.Sprintf(`UPDATE %s SET replayed_at = now(), replay_count = replay_count + 1 WHERE idempotency_key = $1`, s.table), key)
	if err == nil && tag.RowsAffected() != 1 {
		err = errors.New("row not found")
	}
	if err != nil {
		return fmt.Errorf("mark %q replayed: %w", key, err)
	}
	return nil
}

// MarkFailed records a failed replay: the row keeps its place and gets the
// new error.
func (s *Store) MarkFailed(ctx context.Context, key, lastError, class string) error {
	_, err := s.pool.Exec(ctx, fmt.Sprintf(`UPDATE %s SET last_error = $2, error_class = $3, attempts = attempts + 1 WHERE idempotency_key = $1`, s.table), key, lastError, class)
	if err != nil {
		return fmt.Errorf("record replay failure of %q: %w", key, err)
	}
	return nil
}

// Counts returns the number of rows not yet replayed and replayed.
func (s *Store) Counts(ctx context.Context) (pending, replayed int64, err error) {
	err = s.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FILTER (WHERE replayed_at IS NULL), count(*) FILTER (WHERE replayed_at IS NOT NULL) FROM %s`, s.table)).Scan(&pending, &replayed)
	return pending, replayed, err
}
