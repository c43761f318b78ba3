package position

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Table is the position table created by walpost migrate.
const Table = "walpost_position"

var (
	// ErrGap: walpost confirmed a position on a slot that is now missing or
	// invalidated; events committed since may be missing from Kafka.
	// Terminal.
	ErrGap = errors.New("replication slot lost after a recorded position")
	// ErrOtherSystem: the server behind postgres.url is not the cluster
	// the position was recorded on. Terminal.
	ErrOtherSystem = errors.New("different PostgreSQL cluster behind postgres.url")
	// ErrNoTable: walpost_position does not exist (walpost migrate has not
	// run). Terminal.
	ErrNoTable = errors.New("position table missing")
)

// IsTerminal reports whether err is one of the package's errors that
// reconnecting cannot cure.
func IsTerminal(err error) bool {
	return errors.Is(err, ErrGap) || errors.Is(err, ErrOtherSystem) || errors.Is(err, ErrNoTable)
}

// Identity names a cluster and its history: the system identifier (new
// after initdb, pg_upgrade or a logical restore; kept by a physical backup
// and by standbys) and the timeline (new after a promotion or a
// point-in-time recovery).
type Identity struct {
	SystemID int64
	Timeline int32
}

func (id Identity) String() string {
	return fmt.Sprintf("system identifier %d, timeline %d", id.SystemID, id.Timeline)
}

// Identify reads the server's identity with IDENTIFY_SYSTEM on a
// replication connection (before START_REPLICATION).
func Identify(ctx context.Context, conn *pgconn.PgConn) (Identity, error) {
	id, _, err := IdentifyAt(ctx, conn)
	return id, err
}

// IdentifyAt is Identify with the server's current WAL flush position
// (IDENTIFY_SYSTEM's xlogpos): no position written on this server's WAL
// can be past it.
func IdentifyAt(ctx context.Context, conn *pgconn.PgConn) (Identity, pglogrepl.LSN, error) {
	r, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return Identity{}, 0, fmt.Errorf("identify system: %w", err)
	}
	sys, err := strconv.ParseInt(r.SystemID, 10, 64)
	if err != nil {
		return Identity{}, 0, fmt.Errorf("identify system: system identifier %q: %w", r.SystemID, err)
	}
	return Identity{SystemID: sys, Timeline: r.Timeline}, r.XLogPos, nil
}

// Row is one slot's position.
type Row struct {
	Slot string
	Identity
	// LSN is the confirmed position: every outbox event of a transaction
	// ending at or before it is in Kafka or the poison table.
	LSN pglogrepl.LSN
	// LastCommit is the commit time of the last confirmed transaction;
	// zero before the first one.
	LastCommit time.Time
	// UpdatedAt is when the row was last written (set by Save).
	UpdatedAt time.Time
	// RecoveringSince, when not zero, is when a walpost recover marked
	// the row before creating a slot over a gap (MarkRecovering); Reset
	// clears it. A marked row is refused by Check.
	RecoveringSince time.Time
	// Snapshot, when not empty, is a snapshot of the server
	// (pg_current_snapshot() as text) every transaction visible in which
	// is confirmed: walpost recover re-sends the rows whose inserting
	// transaction it does not show. SnapshotLSN is the WAL insert position
	// read after it, at or below LSN. Empty before the first position
	// write whose confirmed LSN reached a recorded candidate, and where
	// walpost_position lacks the columns (walpost migrate adds them).
	Snapshot    string
	SnapshotLSN pglogrepl.LSN
	// NextSnapshot and NextSnapshotLSN are the candidate taken at the
	// last write: it becomes Snapshot once LSN reaches NextSnapshotLSN.
	// Transactions visible in it and not in Snapshot may have been
	// delivered: recover counts them as re-sent.
	NextSnapshot    string
	NextSnapshotLSN pglogrepl.LSN
}

// Last describes the last confirmed transaction for messages.
func (r Row) Last() string {
	at := "no transaction confirmed yet"
	if !r.LastCommit.IsZero() {
		at = "last confirmed transaction committed at " + r.LastCommit.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("LSN %s, %s, recorded %s", r.LSN, at, r.UpdatedAt.UTC().Format(time.RFC3339))
}

// DB is what the store needs of a connection or a pool.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store reads and writes walpost_position.
type Store struct {
	db DB
	// LockTimeout bounds a position write's wait for the row's lock
	// (lock_timeout, set for the transaction only); 0 is
	// DefaultLockTimeout. A write that
	// gives up fails and is made again at the next write: the stream
	// never waits behind a lock it cannot see.
	LockTimeout time.Duration
	// IdleTimeout is the server's bound on one of the store's
	// transactions left idle by its client
	// (idle_in_transaction_session_timeout, set for the transaction only);
	// 0 is DefaultIdleTimeout.
	// A connection cut off between its UPDATE and its COMMIT (a
	// half-open TCP connection, which the server does not notice for
	// hours) would hold the row's lock until then; the server ends that
	// transaction after IdleTimeout and the lock is free again.
	IdleTimeout time.Duration
	// noSnapshots: the table lacks the snapshot columns (a walpost
	// migrate of an older version); writes leave them out.
	noSnapshots atomic.Bool
}

// DefaultLockTimeout and DefaultIdleTimeout are Store's bounds unless set.
const (
	DefaultLockTimeout = 5 * time.Second
	DefaultIdleTimeout = 30 * time.Second
)

// begin sets a write transaction's settings in one round trip:
// synchronous_commit = on (the user's database may run with it off; the
// position must survive a crash the slot does not), the idle bound, and
// the lock bound when lock is set (Save's; recover's writes wait for the
// lock, which the idle bound frees).
func (s *Store) begin(ctx context.Context, tx pgx.Tx, lock bool) error {
	idle := cmp.Or(s.IdleTimeout, DefaultIdleTimeout)
	wait := time.Duration(0)
	if lock {
		wait = cmp.Or(s.LockTimeout, DefaultLockTimeout)
	}
	_, err := tx.Exec(ctx, `SELECT set_config('synchronous_commit', 'on', true),
	set_config('idle_in_transaction_session_timeout', $1, true),
	set_config('lock_timeout', $2, true)`,
		strconv.FormatInt(max(idle.Milliseconds(), 1), 10), strconv.FormatInt(wait.Milliseconds(), 10))
	return err
}

// errRetryWithout: Save found no snapshot columns and writes again
// without them.
var errRetryWithout = errors.New("walpost_position has no snapshot columns")

func missingColumn(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42703"
}

// saveWithSnapshot is Save's write with a new candidate snapshot: the
// server's snapshot now, then the WAL insert position (read after it, in
// a statement of its own, so every transaction the snapshot shows had
// inserted its commit record before it). The row's previous candidate
// becomes its snapshot when the confirmed LSN written reaches the
// candidate's position.
func (s *Store) saveWithSnapshot(ctx context.Context, tx pgx.Tx, r Row, last *time.Time) error {
	var snap, at string
	if err := tx.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&snap); err != nil {
		return err
	}
	if err := tx.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&at); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+Table+` AS p (slot, system_identifier, timeline, confirmed_lsn, last_commit_at, updated_at, next_snapshot, next_snapshot_lsn)
VALUES ($1, $2, $3, $4::pg_lsn, $5, now(), $6::pg_snapshot, $7::pg_lsn)
ON CONFLICT (slot) DO UPDATE SET timeline = excluded.timeline, confirmed_lsn = excluded.confirmed_lsn,
    last_commit_at = COALESCE(excluded.last_commit_at, p.last_commit_at), updated_at = excluded.updated_at,
    snapshot = CASE WHEN p.next_snapshot_lsn <= excluded.confirmed_lsn AND p.timeline = excluded.timeline THEN p.next_snapshot ELSE p.snapshot END,
    snapshot_lsn = CASE WHEN p.next_snapshot_lsn <= excluded.confirmed_lsn AND p.timeline = excluded.timeline THEN p.next_snapshot_lsn ELSE p.snapshot_lsn END,
    -- The candidate is kept until the confirmed position reaches it, so
    -- a walpost that lags more than one write interval still promotes one.
    next_snapshot = CASE WHEN p.next_snapshot IS NULL OR p.next_snapshot_lsn <= excluded.confirmed_lsn OR p.timeline <> excluded.timeline
        THEN excluded.next_snapshot ELSE p.next_snapshot END,
    next_snapshot_lsn = CASE WHEN p.next_snapshot IS NULL OR p.next_snapshot_lsn <= excluded.confirmed_lsn OR p.timeline <> excluded.timeline
        THEN excluded.next_snapshot_lsn ELSE p.next_snapshot_lsn END
WHERE p.system_identifier = excluded.system_identifier
  AND (p.confirmed_lsn < excluded.confirmed_lsn OR p.timeline <> excluded.timeline)`,
		r.Slot, r.SystemID, r.Timeline, r.LSN.String(), last, snap, at)
	return err
}

// NewStore returns a store over db (a *pgxpool.Pool or a *pgx.Conn).
func NewStore(db DB) *Store { return &Store{db: db} }

// Load reads the slot's row; ok is false when there is none. A missing
// table is ErrNoTable.
func (s *Store) Load(ctx context.Context, slot string) (row Row, ok bool, err error) {
	var lsn string
	var last, recovering *time.Time
	var snap, snapLSN, next, nextLSN *string
	// The snapshot columns through to_jsonb: a table walpost migrate has
	// not given them yet reads as without a snapshot.
	err = s.db.QueryRow(ctx, `SELECT slot, system_identifier, timeline, confirmed_lsn::text, last_commit_at, updated_at, recovering_since,
	to_jsonb(p) ->> 'snapshot', to_jsonb(p) ->> 'snapshot_lsn', to_jsonb(p) ->> 'next_snapshot', to_jsonb(p) ->> 'next_snapshot_lsn'
FROM `+Table+` p WHERE slot = $1`, slot).
		Scan(&row.Slot, &row.SystemID, &row.Timeline, &lsn, &last, &row.UpdatedAt, &recovering, &snap, &snapLSN, &next, &nextLSN)
	if errors.Is(err, pgx.ErrNoRows) {
		return Row{}, false, nil
	}
	if err != nil {
		return Row{}, false, fmt.Errorf("read %s: %w", Table, explain(err))
	}
	if row.LSN, err = pglogrepl.ParseLSN(lsn); err != nil {
		return Row{}, false, fmt.Errorf("read %s: confirmed_lsn %q: %w", Table, lsn, err)
	}
	if last != nil {
		row.LastCommit = *last
	}
	if recovering != nil {
		row.RecoveringSince = *recovering
	}
	if snap != nil && snapLSN != nil {
		if l, err := pglogrepl.ParseLSN(*snapLSN); err == nil {
			row.Snapshot, row.SnapshotLSN = *snap, l
		}
	}
	if next != nil && nextLSN != nil {
		if l, err := pglogrepl.ParseLSN(*nextLSN); err == nil {
			row.NextSnapshot, row.NextSnapshotLSN = *next, l
		}
	}
	return row, true, nil
}

// Save writes r with synchronous_commit = on, so the row is on disk when
// Save returns. It never moves a row backwards on the same timeline and
// never overwrites the row of another system identifier: such a Save
// changes nothing and returns nil. A zero LastCommit keeps the stored one.
func (s *Store) Save(ctx context.Context, r Row) error {
	var last *time.Time
	if !r.LastCommit.IsZero() {
		last = &r.LastCommit
	}
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := s.begin(ctx, tx, true); err != nil {
			return err
		}
		if !s.noSnapshots.Load() {
			err := s.saveWithSnapshot(ctx, tx, r, last)
			if !missingColumn(err) {
				return err
			}
			// walpost_position predates the snapshot columns: the
			// position is written without them (recover then chooses the
			// gap's rows by created_at) until walpost migrate adds them.
			s.noSnapshots.Store(true)
			return errRetryWithout
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+Table+` AS p (slot, system_identifier, timeline, confirmed_lsn, last_commit_at, updated_at)
VALUES ($1, $2, $3, $4::pg_lsn, $5, now())
ON CONFLICT (slot) DO UPDATE SET timeline = excluded.timeline, confirmed_lsn = excluded.confirmed_lsn,
    last_commit_at = COALESCE(excluded.last_commit_at, p.last_commit_at), updated_at = excluded.updated_at
WHERE p.system_identifier = excluded.system_identifier
  AND (p.confirmed_lsn < excluded.confirmed_lsn OR p.timeline <> excluded.timeline)`,
			r.Slot, r.SystemID, r.Timeline, r.LSN.String(), last)
		return err
	})
	if errors.Is(err, errRetryWithout) {
		return s.Save(ctx, r)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", Table, explain(err))
	}
	return nil
}

// MarkRecovering marks the slot's row before walpost recover creates a slot
// over a gap (synchronous_commit = on): until Reset clears the mark, Check
// refuses the row, so a recovery that stops half way is never taken for a
// slot that is simply ahead. The row must exist.
func (s *Store) MarkRecovering(ctx context.Context, slot string) error {
	var n int64
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := s.begin(ctx, tx, false); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE `+Table+` SET recovering_since = now() WHERE slot = $1`, slot)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return fmt.Errorf("mark %s of slot %q as recovering: %w", Table, slot, explain(err))
	}
	if n == 0 {
		return fmt.Errorf("mark %s of slot %q as recovering: no row", Table, slot)
	}
	return nil
}

// Reset replaces the slot's row with r (synchronous_commit = on), whatever
// the stored one holds: it may move the row backwards, to another system
// identifier or timeline, and it clears the recovering mark. Only walpost
// recover calls it, with the position of a slot it has just created and
// whose gap it has produced.
func (s *Store) Reset(ctx context.Context, r Row) error {
	var last *time.Time
	if !r.LastCommit.IsZero() {
		last = &r.LastCommit
	}
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := s.begin(ctx, tx, false); err != nil {
			return err
		}
		if !s.noSnapshots.Load() {
			// The row's snapshot is r's (recover's exported snapshot,
			// at its consistent point) or none: an old one says nothing
			// about the new slot.
			var snap, at *string
			if r.Snapshot != "" {
				l := r.SnapshotLSN.String()
				snap, at = &r.Snapshot, &l
			}
			_, err := tx.Exec(ctx, `INSERT INTO `+Table+` (slot, system_identifier, timeline, confirmed_lsn, last_commit_at, updated_at, recovering_since, snapshot, snapshot_lsn, next_snapshot, next_snapshot_lsn)
VALUES ($1, $2, $3, $4::pg_lsn, $5, now(), NULL, $6::pg_snapshot, $7::pg_lsn, NULL, NULL)
ON CONFLICT (slot) DO UPDATE SET system_identifier = excluded.system_identifier, timeline = excluded.timeline,
    confirmed_lsn = excluded.confirmed_lsn, last_commit_at = excluded.last_commit_at,
    updated_at = excluded.updated_at, recovering_since = NULL,
    snapshot = excluded.snapshot, snapshot_lsn = excluded.snapshot_lsn, next_snapshot = NULL, next_snapshot_lsn = NULL`,
				r.Slot, r.SystemID, r.Timeline, r.LSN.String(), last, snap, at)
			if !missingColumn(err) {
				return err
			}
			s.noSnapshots.Store(true)
			return errRetryWithout
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+Table+` (slot, system_identifier, timeline, confirmed_lsn, last_commit_at, updated_at, recovering_since)
VALUES ($1, $2, $3, $4::pg_lsn, $5, now(), NULL)
ON CONFLICT (slot) DO UPDATE SET system_identifier = excluded.system_identifier, timeline = excluded.timeline,
    confirmed_lsn = excluded.confirmed_lsn, last_commit_at = excluded.last_commit_at,
    updated_at = excluded.updated_at, recovering_since = NULL`,
			r.Slot, r.SystemID, r.Timeline, r.LSN.String(), last)
		return err
	})
	if errors.Is(err, errRetryWithout) {
		return s.Reset(ctx, r)
	}
	if err != nil {
		return fmt.Errorf("reset %s of slot %q: %w", Table, r.Slot, explain(err))
	}
	return nil
}

func explain(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return fmt.Errorf("%w: table %s does not exist: run walpost migrate (%w)", ErrNoTable, Table, err)
	}
	if errors.As(err, &pgErr) && pgErr.Code == "42703" {
		return fmt.Errorf("%w: table %s lacks a column of this walpost version: run walpost migrate (%w)", ErrNoTable, Table, err)
	}
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		return fmt.Errorf("%w; fix: GRANT SELECT, INSERT, UPDATE ON %s TO <walpost's role>", err, Table)
	}
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
		return fmt.Errorf("another session holds the lock on the slot's row of %s (a walpost connection cut off in the middle of a write holds it until the server ends that transaction, after %s idle; otherwise see pg_locks for the holder); the write is made again at the next one: %w",
			Table, DefaultIdleTimeout, err)
	}
	return err
}
