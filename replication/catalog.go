package replication

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// This file is the one place walpost reads PostgreSQL's catalog from: the
// start-up checks here (Prepare), walpost status and walpost check all go
// through it. The query functions return the driver's error as it is; the
// caller says what it was reading (ReadSlot, ResolveTable and the Check
// functions do, for theirs).

// Querier is what a catalog query runs on: a *pgx.Conn, a *pgxpool.Pool or
// a pgx.Tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// currentWAL is the server's current WAL position: pg_current_wal_lsn() on
// a primary, the last replayed LSN on a standby (where
// pg_current_wal_lsn() fails). Lag and retained WAL are measured from it.
const currentWAL = `CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END`

// Server describes the server a connection is on.
type Server struct {
	Database   string // current_database()
	User       string // current_user
	Version    string // the server_version setting, e.g. "17.2"
	VersionNum int    // the server_version_num setting, e.g. 170002
	InRecovery bool   // pg_is_in_recovery(): a standby
	// CurrentWALLSN is the server's current WAL position (see currentWAL)
	// as the server prints it; nil when a standby has replayed nothing.
	CurrentWALLSN *string
}

// ReadServer reads the connection's database, user, server version and
// current WAL position.
func ReadServer(ctx context.Context, q Querier) (Server, error) {
	var s Server
	err := q.QueryRow(ctx, `
		SELECT current_database(), current_user, current_setting('server_version'),
		       current_setting('server_version_num')::int, pg_is_in_recovery(), (`+currentWAL+`)::text`).
		Scan(&s.Database, &s.User, &s.Version, &s.VersionNum, &s.InRecovery, &s.CurrentWALLSN)
	return s, err
}

// MinVersionNum is the oldest server walpost runs on, as a
// server_version_num: PostgreSQL 14. pgoutput on 13 has no messages
// option, which the stream asks for (the heartbeat arrives as a logical
// message), and walpost is tested on 14 to 18 only.
const MinVersionNum = 140000

// CheckVersion is ErrConfig, naming the server's version, when the server
// is older than MinVersionNum.
func CheckVersion(version string, num int) error {
	if num < MinVersionNum {
		return fmt.Errorf("%w: PostgreSQL %s (server_version_num %d) is not supported: walpost needs PostgreSQL 14 or newer; upgrade the server", ErrConfig, version, num)
	}
	return nil
}

// CheckServerVersion reads the server's version and checks it with
// CheckVersion; num is its server_version_num.
func CheckServerVersion(ctx context.Context, q Querier) (num int, err error) {
	var version string
	if err := q.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('server_version_num')::int`).Scan(&version, &num); err != nil {
		return 0, fmt.Errorf("read server version: %w", err)
	}
	return num, CheckVersion(version, num)
}

// FailoverSlotsVersionNum is the first server_version_num with failover
// slots: PostgreSQL 17.
const FailoverSlotsVersionNum = 170000

// FailoverSetup is what decides whether a failover slot is safe on a
// primary: which standbys stream from it and whether logical decoding
// waits for them.
type FailoverSetup struct {
	// PhysicalStandbys counts the physical WAL senders (streaming
	// standbys) of the server.
	PhysicalStandbys int
	// SynchronizedStandbySlots is the synchronized_standby_slots setting
	// (PostgreSQL 17+; nil before): the physical slots whose standbys must
	// have received WAL before a logical walsender sends it.
	SynchronizedStandbySlots *string
}

// ReadFailoverSetup reads the server's physical standbys and its
// synchronized_standby_slots.
func ReadFailoverSetup(ctx context.Context, q Querier) (FailoverSetup, error) {
	var f FailoverSetup
	// A streaming logical walsender holds a logical slot; a streaming
	// walsender without one is a physical standby. Walsenders in startup
	// (a logical client before START_REPLICATION, creating its slot) or
	// stopping hold none and are no standby, nor is a base backup.
	err := q.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM pg_stat_replication r
		        WHERE r.state IN ('catchup', 'streaming')
		          AND NOT EXISTS (SELECT 1 FROM pg_replication_slots s WHERE s.active_pid = r.pid AND s.slot_type = 'logical')),
		       current_setting('synchronized_standby_slots', true)`).
		Scan(&f.PhysicalStandbys, &f.SynchronizedStandbySlots)
	return f, err
}

// WALLevel is the server's wal_level setting; walpost needs "logical".
func WALLevel(ctx context.Context, q Querier) (string, error) {
	var level string
	err := q.QueryRow(ctx, "SHOW wal_level").Scan(&level)
	return level, err
}

// CanReplicate reports whether the current role has REPLICATION (or is a
// superuser), which a logical replication connection needs.
func CanReplicate(ctx context.Context, q Querier) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, "SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&ok)
	return ok, err
}

// Capacity is how many replication slots and WAL senders the server allows
// and how many are taken.
type Capacity struct {
	MaxSlots, UsedSlots           int // max_replication_slots, rows of pg_replication_slots
	MaxWALSenders, UsedWALSenders int // max_wal_senders, rows of pg_stat_replication
}

// ReadCapacity reads the server's replication slot and WAL sender capacity.
func ReadCapacity(ctx context.Context, q Querier) (Capacity, error) {
	var c Capacity
	err := q.QueryRow(ctx, `SELECT current_setting('max_replication_slots')::int, (SELECT count(*) FROM pg_replication_slots),
		current_setting('max_wal_senders')::int, (SELECT count(*) FROM pg_stat_replication)`).
		Scan(&c.MaxSlots, &c.UsedSlots, &c.MaxWALSenders, &c.UsedWALSenders)
	return c, err
}

// SlotRow is a slot's row of pg_replication_slots as the server prints it,
// with its distance from the server's current WAL position. A nil field is
// a NULL column.
type SlotRow struct {
	SlotType  string  // "logical" or "physical"
	Plugin    *string // the output plugin; nil for a physical slot
	Database  *string // nil for a physical slot
	Active    bool    // a process is streaming from the slot
	ActivePID *int32  // that process's backend pid; nil when inactive
	// ConfirmedFlushLSN is the position up to which the consumer confirmed
	// (nil for a physical slot); RestartLSN is the oldest WAL the slot
	// keeps (nil when it keeps none: lost, or physical and never reserved).
	ConfirmedFlushLSN, RestartLSN *string
	// LagBytes is current WAL − confirmed_flush_lsn; RetainedWALBytes is
	// current WAL − restart_lsn. Nil when either side is.
	LagBytes, RetainedWALBytes *int64
	// WALStatus is reserved, extended, unreserved or lost; nil for a slot
	// that never reserved WAL.
	WALStatus *string
	// SafeWALSize is how many more bytes of WAL may be written before the
	// slot is in danger of being lost; nil when the slot is lost or
	// max_slot_wal_keep_size is -1.
	SafeWALSize *int64
	// SafeWALUnlimited: max_slot_wal_keep_size is -1, so WAL is kept for
	// the slot without limit.
	SafeWALUnlimited bool
	// Failover: the slot is copied to standbys with sync_replication_slots
	// (PostgreSQL 17+); Synced: this slot is such a copy, on a standby.
	// Both nil before 17, which has no such columns.
	Failover, Synced *bool
	// InvalidationReason is why the slot was invalidated (PostgreSQL 17+:
	// wal_removed, rows_removed, wal_level_insufficient; 18: idle_timeout);
	// nil when it is valid or the server has no such column.
	InvalidationReason *string
}

// QuerySlot reads the slot's row; ok is false when there is none.
func QuerySlot(ctx context.Context, q Querier, name string) (row SlotRow, ok bool, err error) {
	var r SlotRow
	err = q.QueryRow(ctx, `
		WITH cur AS (SELECT `+currentWAL+` AS lsn)
		SELECT s.slot_type, s.plugin, s.database, s.active, s.active_pid,
		       s.confirmed_flush_lsn::text, s.restart_lsn::text,
		       pg_wal_lsn_diff(cur.lsn, s.confirmed_flush_lsn)::bigint,
		       pg_wal_lsn_diff(cur.lsn, s.restart_lsn)::bigint,
		       s.wal_status, s.safe_wal_size, current_setting('max_slot_wal_keep_size') = '-1',
		       (to_jsonb(s) ->> 'failover')::bool, (to_jsonb(s) ->> 'synced')::bool,
		       to_jsonb(s) ->> 'invalidation_reason'
		FROM pg_replication_slots s, cur WHERE s.slot_name = $1`, name).
		Scan(&r.SlotType, &r.Plugin, &r.Database, &r.Active, &r.ActivePID, &r.ConfirmedFlushLSN, &r.RestartLSN,
			&r.LagBytes, &r.RetainedWALBytes, &r.WALStatus, &r.SafeWALSize, &r.SafeWALUnlimited, &r.Failover, &r.Synced,
			&r.InvalidationReason)
	if errors.Is(err, pgx.ErrNoRows) {
		return SlotRow{}, false, nil
	}
	if err != nil {
		return SlotRow{}, false, err
	}
	return r, true, nil
}

// Info is the row as a SlotInfo of an existing slot: NULL columns become
// zero values, the LSNs are parsed.
func (r SlotRow) Info() SlotInfo {
	s := SlotInfo{Exists: true, SlotType: r.SlotType, Active: r.Active, SafeWALSize: r.SafeWALSize}
	if r.Plugin != nil {
		s.Plugin = *r.Plugin
	}
	if r.Database != nil {
		s.Database = *r.Database
	}
	if r.ActivePID != nil {
		s.ActivePID = *r.ActivePID
	}
	if r.WALStatus != nil {
		s.WALStatus = *r.WALStatus
	}
	if r.ConfirmedFlushLSN != nil {
		s.ConfirmedFlush, _ = pglogrepl.ParseLSN(*r.ConfirmedFlushLSN)
	}
	if r.RestartLSN != nil {
		s.RestartLSN, _ = pglogrepl.ParseLSN(*r.RestartLSN)
	}
	s.Failover = r.Failover != nil && *r.Failover
	if r.InvalidationReason != nil {
		s.InvalidationReason = *r.InvalidationReason
	}
	return s
}

// SlotInfo is a row of pg_replication_slots.
type SlotInfo struct {
	Exists         bool
	Plugin         string
	SlotType       string
	Database       string
	Active         bool
	ActivePID      int32
	ConfirmedFlush pglogrepl.LSN
	RestartLSN     pglogrepl.LSN
	WALStatus      string
	SafeWALSize    *int64
	Failover       bool // a failover slot (PostgreSQL 17+)
	// InvalidationReason: see SlotRow; empty when valid.
	InvalidationReason string
}

// Invalidated reports whether the slot can no longer be streamed from:
// its WAL is gone (wal_status = lost) or PostgreSQL invalidated it for
// another reason (invalidation_reason, PostgreSQL 17+, e.g. 18's
// idle_timeout).
func (s SlotInfo) Invalidated() bool {
	return s.Exists && (s.WALStatus == "lost" || s.InvalidationReason != "")
}

// InvalidatedWhy says why, naming the setting that did it.
func (s SlotInfo) InvalidatedWhy() string {
	return InvalidationText(s.InvalidationReason, s.WALStatus)
}

// InvalidationText describes an invalidation_reason (or, before
// PostgreSQL 17, wal_status lost) with the setting that caused it.
func InvalidationText(reason, walStatus string) string {
	switch reason {
	case "idle_timeout":
		return "was invalidated (invalidation_reason = idle_timeout: it was inactive for longer than idle_replication_slot_timeout)"
	case "wal_removed", "":
		if reason == "" && walStatus != "lost" {
			return "is valid"
		}
		return "was invalidated (wal_status = lost, max_slot_wal_keep_size exceeded)"
	case "rows_removed":
		return "was invalidated (invalidation_reason = rows_removed: catalog rows it needed were removed)"
	case "wal_level_insufficient":
		return "was invalidated (invalidation_reason = wal_level_insufficient: wal_level was lowered below logical)"
	}
	return fmt.Sprintf("was invalidated (invalidation_reason = %s)", reason)
}

// ReadSlot reads the slot's row; Exists is false when there is none.
func ReadSlot(ctx context.Context, conn *pgx.Conn, slot string) (SlotInfo, error) {
	row, ok, err := QuerySlot(ctx, conn, slot)
	if err != nil {
		return SlotInfo{}, fmt.Errorf("read slot %q: %w", slot, err)
	}
	if !ok {
		return SlotInfo{}, nil
	}
	return row.Info(), nil
}

// Publication is a row of pg_publication.
type Publication struct {
	Name      string
	AllTables bool // FOR ALL TABLES
	// The operations published.
	Insert, Update, Delete, Truncate bool
}

// Operations names the operations published, in the order insert, update,
// delete, truncate.
func (p Publication) Operations() []string {
	var ops []string
	for _, op := range []struct {
		name string
		on   bool
	}{{"insert", p.Insert}, {"update", p.Update}, {"delete", p.Delete}, {"truncate", p.Truncate}} {
		if op.on {
			ops = append(ops, op.name)
		}
	}
	return ops
}

// ReadPublication reads the publication's row; ok is false when there is
// none.
func ReadPublication(ctx context.Context, q Querier, name string) (pub Publication, ok bool, err error) {
	p := Publication{Name: name}
	err = q.QueryRow(ctx, `SELECT puballtables, pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_publication WHERE pubname = $1`, name).
		Scan(&p.AllTables, &p.Insert, &p.Update, &p.Delete, &p.Truncate)
	if errors.Is(err, pgx.ErrNoRows) {
		return Publication{}, false, nil
	}
	if err != nil {
		return Publication{}, false, err
	}
	return p, true, nil
}

// PublicationTables lists the tables the publication covers (every table
// for one FOR ALL TABLES), ordered by schema.table; none when there is no
// such publication.
func PublicationTables(ctx context.Context, q Querier, name string) ([]TableName, error) {
	rows, err := q.Query(ctx, `SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = $1 ORDER BY schemaname || '.' || tablename`, name)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (TableName, error) {
		var t TableName
		err := r.Scan(&t.Schema, &t.Name)
		return t, err
	})
}

// TableName is a resolved table.
type TableName struct{ Schema, Name string }

func (t TableName) String() string { return pgx.Identifier{t.Schema, t.Name}.Sanitize() }

// ResolveTable finds table (as written in config) in the catalog.
func ResolveTable(ctx context.Context, conn *pgx.Conn, table string) (TableName, error) {
	var t TableName
	err := conn.QueryRow(ctx, `
		SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = to_regclass($1)`, table).Scan(&t.Schema, &t.Name)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, fmt.Errorf("%w: table %q does not exist: run walpost migrate, or set postgres.table to the outbox table", ErrConfig, table)
	}
	if err != nil {
		return t, fmt.Errorf("resolve table %q: %w", table, err)
	}
	return t, nil
}

// TableExists reports whether table (as written in config, optionally
// schema-qualified) names a relation on the search path.
func TableExists(ctx context.Context, q Querier, table string) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&ok)
	return ok, err
}

// TableColumns lists the table's columns (not the dropped ones).
func TableColumns(ctx context.Context, q Querier, table TableName) ([]string, error) {
	rows, err := q.Query(ctx, `
		SELECT a.attname FROM pg_attribute a
		WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`, table.String())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// UniqueColumn reports whether column alone carries a UNIQUE index (not
// partial) on table, and whether it is NOT NULL.
func UniqueColumn(ctx context.Context, q Querier, table TableName, column string) (unique, notNull bool, err error) {
	err = q.QueryRow(ctx, `
		SELECT EXISTS (
		         SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
		         WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indnkeyatts = 1 AND i.indpred IS NULL
		           AND a.attname = $2),
		       (SELECT attnotnull FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2)`,
		table.String(), column).Scan(&unique, &notNull)
	return unique, notNull, err
}

// RowStats are the statistics a row count can be estimated from.
type RowStats struct {
	// RelTuples is pg_class.reltuples: moved only by VACUUM and ANALYZE,
	// -1 before the first.
	RelTuples float64
	// LiveTuples is pg_stat_user_tables.n_live_tup, which follows inserts
	// and deletes as they commit; nil when the statistics have no row.
	LiveTuples *int64
}

// ReadRowStats reads the table's row statistics.
func ReadRowStats(ctx context.Context, q Querier, table TableName) (RowStats, error) {
	var s RowStats
	err := q.QueryRow(ctx, `
		SELECT c.reltuples::float8, s.n_live_tup
		FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
		WHERE c.oid = to_regclass($1)`, table.String()).Scan(&s.RelTuples, &s.LiveTuples)
	return s, err
}

// SenderTimeout reads wal_sender_timeout on conn, a replication connection
// before START_REPLICATION: the walsender's own value, with any role,
// database or connection setting applied. Zero means the server never
// times out a silent client, and sends no keepalive while it decodes.
func SenderTimeout(ctx context.Context, conn *pgconn.PgConn) (time.Duration, error) {
	res, err := conn.Exec(ctx, `SELECT setting FROM pg_settings WHERE name = 'wal_sender_timeout'`).ReadAll()
	if err != nil {
		return 0, fmt.Errorf("read wal_sender_timeout: %w", err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 1 {
		return 0, errors.New("read wal_sender_timeout: no such setting")
	}
	ms, err := strconv.ParseInt(string(res[0].Rows[0][0]), 10, 64)
	if err != nil || ms < 0 {
		return 0, fmt.Errorf("read wal_sender_timeout: setting %q is not a number of milliseconds", res[0].Rows[0][0])
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// ColumnType is a column's type name (pg_type.typname) and NOT NULL.
type ColumnType struct {
	Type    string
	NotNull bool
}

// ColumnTypes reads the type of each column of table.
func ColumnTypes(ctx context.Context, q Querier, table TableName) (map[string]ColumnType, error) {
	rows, err := q.Query(ctx, `
		SELECT a.attname, t.typname, a.attnotnull FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
		WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`, table.String())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]ColumnType{}
	for rows.Next() {
		var name string
		var c ColumnType
		if err := rows.Scan(&name, &c.Type, &c.NotNull); err != nil {
			return nil, err
		}
		out[name] = c
	}
	return out, rows.Err()
}

// Managed is what tells a managed PostgreSQL service from a server of
// one's own: the settings only such a service defines (nil when the server
// has no such setting) and RDS's rds_replication role.
type Managed struct {
	RDSLogicalReplication   *string // rds.logical_replication (RDS, Aurora)
	CloudSQLLogicalDecoding *string // cloudsql.logical_decoding (Cloud SQL)
	AzureReplicationSupport *string // azure.replication_support (Azure Single Server)
	AzureExtensions         *string // azure.extensions (Azure Flexible Server)
	RDSReplicationRole      bool    // the role rds_replication exists
	InRDSReplication        bool    // the current role is a member of rds_replication
}

// ReadManaged reads the settings and roles of Managed.
func ReadManaged(ctx context.Context, q Querier) (Managed, error) {
	var m Managed
	err := q.QueryRow(ctx, `SELECT current_setting('rds.logical_replication', true),
		current_setting('cloudsql.logical_decoding', true),
		current_setting('azure.replication_support', true),
		current_setting('azure.extensions', true),
		EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'rds_replication'),
		COALESCE((SELECT pg_has_role(current_user, oid, 'MEMBER') FROM pg_roles WHERE rolname = 'rds_replication'), false)`).
		Scan(&m.RDSLogicalReplication, &m.CloudSQLLogicalDecoding, &m.AzureReplicationSupport, &m.AzureExtensions, &m.RDSReplicationRole, &m.InRDSReplication)
	return m, err
}
