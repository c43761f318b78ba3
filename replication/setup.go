package replication

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Config configures the replication side.
type Config struct {
	// Slot is the logical slot (pgoutput), created when missing.
	Slot string
	// Publication covers exactly the outbox table, inserts only.
	Publication string
	// Table is the outbox table, optionally schema-qualified.
	Table string
	// Columns names the outbox columns (config mapping.*); the zero value
	// is walpost's layout.
	Columns Columns
	// StatusInterval is the longest pause between standby status updates;
	// keep it well below wal_sender_timeout. Default 10s.
	StatusInterval time.Duration
	// ReceiveTimeout ends the session when the server sent nothing for
	// this long while walpost was reading (a silent, half-open
	// connection). Periodic status updates ask the server to reply, so a
	// live connection always answers within StatusInterval. Default 30s.
	ReceiveTimeout time.Duration
	// DrainTimeout bounds a stop: reading on to the open transaction's
	// commit and then waiting for in-flight events to be handled share
	// one deadline, DrainTimeout after the stream saw its context end,
	// before the final status update. Default 30s.
	DrainTimeout time.Duration
	// StopDeadline, when set, replaces that deadline: the stream calls it
	// once, after its context ended, and finishes the drain by the time
	// it returns (the forwarder shares one deadline between the stream,
	// the isolator and the final flush of the sink). Nil: DrainTimeout
	// from the end of the context.
	StopDeadline func() time.Time
	// SlotConfirmed reads the slot's confirmed_flush_lsn (on a connection
	// other than the replication one). The stream calls it once, right
	// after START_REPLICATION succeeded, and moves the tracker's start
	// forward when the slot is ahead of it: another process (a standby
	// walpost) may have confirmed between the read the tracker started
	// at and the start, and the first status update must not move the
	// slot back (INV-4). Nil: the tracker's start is used as it is.
	SlotConfirmed func(ctx context.Context) (pglogrepl.LSN, error)
	// Logger receives the stream's logs; nil discards them.
	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.StatusInterval <= 0 {
		c.StatusInterval = 10 * time.Second
	}
	if c.ReceiveTimeout <= 0 {
		c.ReceiveTimeout = 30 * time.Second
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// SenderTimeoutMargin is how far ReceiveTimeoutFor keeps the receive
// timeout above the server's wal_sender_timeout.
const SenderTimeoutMargin = 10 * time.Second

// ReceiveTimeoutFor is the receive timeout to use against a server whose
// wal_sender_timeout is sender: the configured one, raised to sender +
// SenderTimeoutMargin when that is longer. While the server replays a
// large transaction that has nothing for walpost it reads no status
// updates and sends only a keepalive every wal_sender_timeout/2, so a
// shorter timeout would end a live session, and the next one would decode
// the same transaction again: the slot would never move. With sender 0
// (the server never times out) there is no such bound and the configured
// timeout stays.
func ReceiveTimeoutFor(configured, sender time.Duration) time.Duration {
	if sender > 0 && configured < sender+SenderTimeoutMargin {
		return sender + SenderTimeoutMargin
	}
	return configured
}

// StatusIntervalFor is the status interval to use against a server whose
// wal_sender_timeout is sender: the configured one, lowered to sender/2
// when that is shorter. The walsender ends a connection that sent no
// status update for wal_sender_timeout; while walpost does not read (its
// in-flight budget is full, INV-6) it does not see the keepalives that ask
// for one, so only the periodic update keeps the session, and one that
// comes every postgres.status_interval (10 s) would lose it on a server
// with a shorter timeout. With sender 0 the configured interval stays.
func StatusIntervalFor(configured, sender time.Duration) time.Duration {
	if sender > 0 && configured > sender/2 {
		return max(sender/2, minStatusInterval)
	}
	return configured
}

// minStatusInterval bounds StatusIntervalFor below (a wal_sender_timeout
// of a few milliseconds would make a busy loop of status updates).
const minStatusInterval = 100 * time.Millisecond

// CheckPublication verifies the publication exists, covers exactly table
// and publishes inserts. pgoutput reports a missing publication only when
// the first change is decoded, so this runs up front (DESIGN.md, PostgreSQL facts).
func CheckPublication(ctx context.Context, conn *pgx.Conn, publication string, table TableName) error {
	pub, ok, err := ReadPublication(ctx, conn, publication)
	if err != nil {
		return fmt.Errorf("read publication %q: %w", publication, err)
	}
	if !ok {
		return fmt.Errorf("%w: publication %q does not exist: create it with CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert') (walpost migrate creates walpost_outbox)",
			ErrConfig, publication, publication, table)
	}
	if pub.AllTables {
		return fmt.Errorf("%w: publication %q is FOR ALL TABLES: it must cover only the outbox; re-create it with CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert')",
			ErrConfig, publication, publication, table)
	}
	if !pub.Insert {
		return fmt.Errorf("%w: publication %q does not publish inserts: ALTER PUBLICATION %s SET (publish = 'insert')", ErrConfig, publication, publication)
	}
	tables, err := PublicationTables(ctx, conn, publication)
	if err != nil {
		return fmt.Errorf("read publication tables: %w", err)
	}
	found := false
	for _, t := range tables {
		if t == table {
			found = true
		} else {
			return fmt.Errorf("%w: publication %q also covers %s: it must cover only the outbox: ALTER PUBLICATION %s DROP TABLE %s",
				ErrConfig, publication, t, publication, t)
		}
	}
	if !found {
		return fmt.Errorf("%w: publication %q does not cover %s: ALTER PUBLICATION %s ADD TABLE %s", ErrConfig, publication, table, publication, table)
	}
	return nil
}

// CheckColumns verifies the outbox table has the columns mapping needs.
func CheckColumns(ctx context.Context, conn *pgx.Conn, table TableName, mapping Columns) error {
	cols, err := TableColumns(ctx, conn, table)
	if err != nil {
		return fmt.Errorf("read columns of %s: %w", table, err)
	}
	have := map[string]bool{}
	for _, c := range cols {
		have[c] = true
	}
	l := mapping.layout()
	if col, key, missing := l.missing(func(n string) bool { return have[n] }); missing {
		fix := "run walpost migrate or add the column"
		if key != "" {
			fix = "add the column, or set " + key + " to the column that holds it"
		}
		return fmt.Errorf("%w: %s: %s", ErrSchema, missingText(table.String(), col, key, mapping.Required()), fix)
	}
	return nil
}

// Prepare checks the database (the server's version first), creates the slot when missing (after the
// publication, DESIGN.md, PostgreSQL facts) and returns the slot's state. A lost slot is
// ErrSlotLost: walpost never re-creates a slot silently.
func Prepare(ctx context.Context, conn *pgx.Conn, cfg Config) (TableName, SlotInfo, error) {
	versionNum, err := CheckServerVersion(ctx, conn)
	if err != nil {
		return TableName{}, SlotInfo{}, err
	}
	walLevel, err := WALLevel(ctx, conn)
	if err != nil {
		return TableName{}, SlotInfo{}, fmt.Errorf("read wal_level: %w", err)
	}
	if walLevel != "logical" {
		return TableName{}, SlotInfo{}, fmt.Errorf("%w: wal_level is %q: set wal_level = logical in postgresql.conf and restart PostgreSQL", ErrConfig, walLevel)
	}
	table, err := ResolveTable(ctx, conn, cfg.Table)
	if err != nil {
		return table, SlotInfo{}, err
	}
	if err := CheckColumns(ctx, conn, table, cfg.Columns); err != nil {
		return table, SlotInfo{}, err
	}
	if err := CheckPublication(ctx, conn, cfg.Publication, table); err != nil {
		return table, SlotInfo{}, err
	}
	slot, err := ReadSlot(ctx, conn, cfg.Slot)
	if err != nil {
		return table, slot, err
	}
	if !slot.Exists {
		// On 17+ a failover slot (on a primary; a standby refuses one): a
		// standby with sync_replication_slots keeps a copy, which walpost
		// can stream from after a promotion.
		create := `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`
		if versionNum >= FailoverSlotsVersionNum {
			create = `SELECT pg_create_logical_replication_slot($1, 'pgoutput', false, false, NOT pg_is_in_recovery())`
		}
		if _, err := conn.Exec(ctx, create, cfg.Slot); err != nil {
			var pgErr *pgconn.PgError
			if !(errors.As(err, &pgErr) && pgErr.Code == "42710") { // created concurrently by a standby
				return table, slot, fmt.Errorf("create replication slot %q: %w", cfg.Slot, Explain(err, cfg.Slot, cfg.Publication))
			}
		} else if cfg.Logger != nil {
			cfg.Logger.Info("created replication slot", "slot", cfg.Slot)
		}
		if slot, err = ReadSlot(ctx, conn, cfg.Slot); err != nil {
			return table, slot, err
		}
	}
	if err := CheckSlot(ctx, conn, cfg.Slot, slot); err != nil {
		return table, slot, err
	}
	return table, slot, nil
}

// EnableFailover makes the existing slot name a failover slot on a
// PostgreSQL 17+ primary with ALTER_REPLICATION_SLOT on the replication
// connection repl: a slot created before walpost made failover slots (or
// by hand) keeps its position and is copied to standbys from then on. It
// returns false on a standby, where a slot cannot be altered, and needs
// the slot inactive.
func EnableFailover(ctx context.Context, side *pgx.Conn, repl *pgconn.PgConn, name string) (bool, error) {
	var standby bool
	if err := side.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&standby); err != nil {
		return false, fmt.Errorf("read pg_is_in_recovery(): %w", err)
	}
	if standby {
		return false, nil
	}
	if _, err := repl.Exec(ctx, `ALTER_REPLICATION_SLOT `+pgx.Identifier{name}.Sanitize()+` ( FAILOVER true )`).ReadAll(); err != nil {
		return false, fmt.Errorf("make slot %q a failover slot: %w", name, err)
	}
	return true, nil
}

// CheckSlot verifies an existing slot is usable by walpost.
func CheckSlot(ctx context.Context, conn *pgx.Conn, name string, slot SlotInfo) error {
	if slot.Invalidated() {
		return fmt.Errorf("%w: slot %q %s: it can no longer be streamed from, so events written after its confirmed position %s may never be delivered; run walpost recover --since TIME (the commit time of the last event known delivered), which drops it, creates it again with an exported snapshot and produces the outbox rows committed since; or by hand drop it with SELECT pg_drop_replication_slot('%s'), start walpost to re-create it, and reconcile outbox rows written since %s",
			ErrSlotLost, name, slot.InvalidatedWhy(), slot.ConfirmedFlush, name, slot.ConfirmedFlush)
	}
	if slot.SlotType != "logical" {
		return fmt.Errorf("%w: slot %q is a %s slot; walpost needs a logical slot: choose another postgres.slot", ErrConfig, name, slot.SlotType)
	}
	if slot.Plugin != "pgoutput" {
		return fmt.Errorf("%w: slot %q uses plugin %q; walpost needs pgoutput: choose another postgres.slot", ErrConfig, name, slot.Plugin)
	}
	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		return fmt.Errorf("read current database: %w", err)
	}
	if slot.Database != db {
		return fmt.Errorf("%w: slot %q belongs to database %q, not %q: choose another postgres.slot or connect to %q", ErrConfig, name, slot.Database, db, slot.Database)
	}
	return nil
}

// replicationConfig is the connection config of a replication connection
// to connString, with walpost's startup parameters.
func replicationConfig(connString string) (*pgconn.Config, error) {
	cfg, err := pgconn.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("parse postgres.url: %w", err)
	}
	cfg.RuntimeParams["replication"] = "database"
	forceRendering(cfg.RuntimeParams)
	ownSession(cfg.RuntimeParams)
	cfg.RuntimeParams["application_name"] = "walpost"
	return cfg, nil
}

// forceRendering sets DateStyle ISO and TimeZone UTC in params, the
// startup parameters of the replication connection, so pgoutput renders
// created_at as outbox.AppendRFC3339 expects whatever the server's, the
// role's or the URL's settings. PostgreSQL matches parameter names case-
// insensitively and the startup packet carries a map (no order), so a
// ?timezone=… or PGTZ (pgconn's "timezone") must be removed, not outvoted;
// options=-c TimeZone=… is applied before the startup parameters and loses.
func forceRendering(params map[string]string) {
	for k := range params {
		if strings.EqualFold(k, "DateStyle") || strings.EqualFold(k, "TimeZone") {
			delete(params, k)
		}
	}
	params["DateStyle"] = "ISO"
	params["TimeZone"] = "UTC"
	byteaHex(params)
}

// byteaHex sets bytea_output = hex (PostgreSQL's default, which a role or
// a database may change to escape) in params, the startup parameters of
// a connection walpost reads outbox rows as text on: the Kafka sink
// decodes a bytea payload's hex text (\x…) only.
func byteaHex(params map[string]string) {
	for k := range params {
		if strings.EqualFold(k, "bytea_output") {
			delete(params, k)
		}
	}
	params["bytea_output"] = "hex"
}

// replicationReadBuffer is the read buffer of a replication connection.
const replicationReadBuffer = 256 << 10

// ConnectReplication opens a logical replication connection.

func ConnectReplication(ctx context.Context, connString string) (*pgconn.PgConn, error) {
	cfg, err := replicationConfig(connString)
	if err != nil {
		return nil, err
	}
	// The walsender streams many small messages: when a backlog waits in
	// the socket, read it in large chunks rather than pgproto3's 8 KiB.
	// Under it, lowatReader batches reads while a backlog drains.
	var lr *lowatReader
	cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		var rd io.Reader = r
		if lr = newLowatReader(r, w); lr != nil {
			rd = lr
		}
		return pgproto3.NewFrontend(bufio.NewReaderSize(rd, replicationReadBuffer), w)
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	for err != nil && dropUnknownSetting(err, cfg.RuntimeParams) {
		conn, err = pgconn.ConnectConfig(ctx, cfg)
	}
	if err != nil {
		return nil, err
	}
	if err := transactionTimeoutOff(ctx, conn); err != nil {
		_ = conn.Close(ctx)
		return nil, err
	}
	if lr != nil {
		conn.CustomData()[lowatKey] = lr
	}
	return conn, nil
}
