package poison

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walpost/walpost/outbox"
)

// Entry is one quarantined event.
type Entry struct {
	Event      *outbox.Event
	Topic      string // resolved topic; with a topic template the row's topic column ("" for NULL), which a replay resolves
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
	Payload        string    `json:"payload"` // "null" for a NULL payload (PayloadNull)
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
	// PayloadNull: the payload is NULL (not the JSON null); a replay
	// sends it as the mapping does a NULL payload
	// (mapping.tombstone_on_empty_payload).
	PayloadNull bool `json:"-"`
}

// Store writes and reads the poison table over its own pool, separate
// from the replication connection.
type Store struct {
	pool  *pgxpool.Pool
	table string // sanitized identifier
	// checked holds the column types Check read (nil before: the types
	// walpost's migrations create).
	checked atomic.Pointer[colTypes]
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

// identity is the outbox_id a row is stored under, cast to the column's
// type typ, from the parameters key, id and lsn: the event's outbox id, or,
// for an event whose id is NULL, a uuid derived from its idempotency key
// and commit LSN (as migration 00002 does for such rows already there).
func identity(key, id, lsn, typ string) string {
	return fmt.Sprintf(`coalesce(%s::text, md5(%s::text || '/' || %s::text)::uuid::text)::%s`, id, key, lsn, typ)
}

// insertSQL is Put's statement for the column types t (Check reads them;
// the defaults are the types walpost's migrations create).
func (s *Store) insertSQL(t colTypes) string {
	return fmt.Sprintf(`
		INSERT INTO %s (idempotency_key, outbox_id, payload, created_at, topic, partition_key, event_type, headers,
		                attempts, last_error, error_class, commit_lsn)
		VALUES ($1, %s, $3::text::%s, $4::timestamptz, $5, $6, $7, $8::text::%s, $9, $10, $11, $12::text::pg_lsn)
		ON CONFLICT (outbox_id, commit_lsn) DO NOTHING`, s.table, identity("$1", "$2", "$12", t.outboxID), t.payload, t.headers)
}

// Put inserts the entry under the event's identity (outbox id, commit
// LSN), so two events with one idempotency key are two rows. It returns
// once the insert committed. The same event put again (a restart before the
// slot moved past it) is kept once and is no error; a different event
// that finds its identity taken is an error wrapping ErrUnwritable, as is a
// value or a schema the poison table refuses (SQLSTATE classes 22, 23 and
// 42, except 42501: a missing privilege is granted at run time, so it is
// retried): neither heals by retrying.
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
	t := s.types()
	lsn := ev.CommitLSN.String()
	tag, err := s.pool.Exec(ctx, s.insertSQL(t),
		ev.IdempotencyKey, id, payload, created, e.Topic, pk, et, headers,
		e.Attempts, e.LastError, e.ErrorClass, lsn)
	if err != nil {
		if permanent(err) {
			return s.explain(ctx, ev.IdempotencyKey, t, err, id, payload, created, headers, lsn)
		}
		return fmt.Errorf("insert into poison table %s: %w", s.table, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	// Nothing written: the identity is taken. By this event (kept once)
	// or by another one, which must not be dropped in its favour.
	var heldKey string
	err = s.pool.QueryRow(ctx, fmt.Sprintf(`SELECT idempotency_key FROM %s WHERE outbox_id = %s AND commit_lsn = $3::text::pg_lsn`,
		s.table, identity("$1", "$2", "$3", t.outboxID)), ev.IdempotencyKey, id, lsn).Scan(&heldKey)
	if err != nil {
		return fmt.Errorf("insert into poison table %s wrote nothing for %q; reading the row that holds its outbox_id and commit_lsn: %w", s.table, ev.IdempotencyKey, err)
	}
	if heldKey == ev.IdempotencyKey {
		return nil
	}
	return &TableError{
		Table: s.table, Key: ev.IdempotencyKey, Column: "outbox_id",
		Problem: fmt.Sprintf("a different event (idempotency_key %q) already holds outbox_id %s at commit_lsn %s, so this event's row was not written", heldKey, idText(id), lsn),
		Fix:     "every outbox row needs its own id; inspect both with walpost poison list, then restart walpost",
	}
}

func idText(id *string) string {
	if id == nil {
		return "NULL (derived from the key and the commit LSN)"
	}
	return *id
}

// Filter selects rows.
type Filter struct {
	Keys  []string // only these keys; empty means all
	All   bool     // include rows already replayed
	Limit int      // 0 means no limit
}

// List returns rows in created_at order (then commit order): every row
// of a key, one per quarantined event.
func (s *Store) List(ctx context.Context, f Filter) ([]Row, error) {
	q := fmt.Sprintf(`
		SELECT idempotency_key, coalesce(outbox_id::text, ''), topic, partition_key, event_type, coalesce(payload::text, 'null'),
		       payload IS NULL, headers::text, created_at, attempts, last_error, error_class, commit_lsn::text, poisoned_at, replayed_at, replay_count
		FROM %s
		WHERE ($1::text[] IS NULL OR idempotency_key = ANY($1)) AND ($2 OR replayed_at IS NULL)
		ORDER BY created_at, commit_lsn, poisoned_at, idempotency_key, outbox_id`, s.table)
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
		err := r.Scan(&x.IdempotencyKey, &x.OutboxID, &x.Topic, &x.PartitionKey, &x.EventType, &x.Payload, &x.PayloadNull, &x.Headers,
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

// MarkReplayed records a successful replay of the row r (addressed by its
// identity, outbox_id and commit_lsn, never by its key alone); the row
// stays.
func (s *Store) MarkReplayed(ctx context.Context, r Row) error {
	tag, err := s.pool.Exec(ctx, fmt.Sprintf(`UPDATE %s SET replayed_at = now(), replay_count = replay_count + 1
		WHERE outbox_id = $1::text::%s AND commit_lsn = $2::text::pg_lsn`, s.table, s.types().outboxID), r.OutboxID, r.CommitLSN)
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("%d rows with outbox_id %s and commit_lsn %s, want 1", tag.RowsAffected(), r.OutboxID, r.CommitLSN)
	}
	if err != nil {
		return fmt.Errorf("mark %q replayed: %w", r.IdempotencyKey, err)
	}
	return nil
}

// MarkFailed records a failed replay of the row r: it keeps its place and
// gets the new error.
func (s *Store) MarkFailed(ctx context.Context, r Row, lastError, class string) error {
	tag, err := s.pool.Exec(ctx, fmt.Sprintf(`UPDATE %s SET last_error = $3, error_class = $4, attempts = attempts + 1
		WHERE outbox_id = $1::text::%s AND commit_lsn = $2::text::pg_lsn`, s.table, s.types().outboxID), r.OutboxID, r.CommitLSN, lastError, class)
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("%d rows with outbox_id %s and commit_lsn %s, want 1", tag.RowsAffected(), r.OutboxID, r.CommitLSN)
	}
	if err != nil {
		return fmt.Errorf("record replay failure of %q: %w", r.IdempotencyKey, err)
	}
	return nil
}

// Counts returns the number of rows not yet replayed and replayed.
func (s *Store) Counts(ctx context.Context) (pending, replayed int64, err error) {
	err = s.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FILTER (WHERE replayed_at IS NULL), count(*) FILTER (WHERE replayed_at IS NOT NULL) FROM %s`, s.table)).Scan(&pending, &replayed)
	return pending, replayed, err
}
