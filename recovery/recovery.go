package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/kafkaconf"
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// CommitSlack is how far before the last confirmed commit time the rows
// chosen by commit timestamp start: a commit timestamp is taken just before
// the commit record is written, so two concurrent transactions can commit
// in one order and carry timestamps in the other.
const CommitSlack = time.Second

var (
	// ErrNothingToRecover: the slot exists and is usable; walpost run
	// streams from it.
	ErrNothingToRecover = errors.New("nothing to recover")
	// ErrRefused: recover will not run as asked; the message names the
	// flag or the fix.
	ErrRefused = errors.New("walpost recover refused")
)

// Options are the command's flags.
type Options struct {
	// Since, when not zero, is the commit time (created_at without commit
	// timestamps) from which rows are re-sent, instead of the recorded
	// position's; no margin is applied to it.
	Since time.Time
	// DryRun prints the plan: nothing is marked, created or produced.
	DryRun bool
	// AllowOtherSystem lets recover replace a position recorded on another
	// system identifier (the database was restored or upgraded here).
	AllowOtherSystem bool
	// AllowDuplicates lets recover run in exactly-once mode
	// (delivery.mode = exactly-once), where the rows it re-sends may
	// already be in committed Kafka transactions and read_committed
	// consumers then see them twice; without it Run refuses (ErrRefused)
	// before it connects to anything. Unused in at-least-once mode and
	// with DryRun.
	AllowDuplicates bool
}

// By names how the gap's rows are chosen.
type By string

const (
	ByCommitTimestamp By = "commit timestamp"     // pg_xact_commit_timestamp(xmin)
	ByCreatedAt       By = "created_at"           // track_commit_timestamp off, no recorded snapshot
	BySnapshot        By = "transaction snapshot" // track_commit_timestamp off: the position's recorded snapshot
	BySince           By = "commit time --since"  // the flag, no margin
	ByAll             By = "the whole table"      // no transaction was ever confirmed
)

// Report is what recover did (or, with DryRun, would do).
type Report struct {
	DryRun bool
	Slot   string
	Table  string
	// Old is the recorded position (zero without one); Server the
	// server's identity.
	Old    position.Row
	HadRow bool
	Server position.Identity
	// SlotState is what recover found: "missing", "invalidated (dropped)",
	// "left by an unfinished recovery (dropped)".
	SlotState string
	// By and the bounds: rows with a commit timestamp at or after
	// CommitFrom, and rows without one (track_commit_timestamp off, or
	// committed before it was turned on) created at or after CreatedFrom;
	// no bound (both zero) with ByAll.
	By          By
	CommitFrom  time.Time
	CreatedFrom time.Time
	// Found rows in the snapshot (with DryRun: now, outside a snapshot);
	// Produced were acknowledged by Kafka.
	Found, Produced int
	// Resent are the chosen rows committed (created, without commit
	// timestamps) at or before the recorded last commit: most of them were
	// delivered before and are sent again, for consumers to deduplicate.
	Resent int
	// First and Last bound the chosen rows' commit (or created_at) times.
	First, Last time.Time
	// Oldest is the created_at of the oldest row in the table (zero when
	// it is empty): rows deleted before it are gone.
	Oldest time.Time
	// SnapshotFrom, with BySnapshot, is the recorded snapshot: the rows
	// whose inserting transaction it does not show were chosen, whatever
	// their created_at. SnapshotLSN is the WAL position every transaction
	// it shows had committed by.
	SnapshotFrom string
	SnapshotLSN  pglogrepl.LSN
	// maybeFrom is the position's candidate snapshot: chosen rows whose
	// transaction it shows may have been delivered (Resent).
	maybeFrom string
	// New is the recorded position: the new slot's consistent point.
	New position.Row
	// Snapshot is the exported snapshot's name.
	Snapshot string
	// ExactlyOnce: delivery.mode is exactly-once. The gap was produced in
	// Txns Kafka transactions, the last of which committed Checkpoint (the
	// slot's record in CheckpointTopic at New's LSN).
	ExactlyOnce     bool
	Txns            int
	Checkpoint      kafka.TxnMark
	CheckpointTopic string
}

// Recoverer runs walpost recover.
type Recoverer struct {
	Config *config.Config
	// Sink receives the gap's events: walpost's idempotent Kafka producer
	// (kafka.New of kafkaconf.ConfigFrom). Unused with DryRun and in
	// exactly-once mode, where Run opens the slot's transactional
	// producer itself once it knows the server's system identifier.
	Sink   sink.Sink
	Logger *slog.Logger
	// MaxInFlight bounds records produced and not yet acknowledged;
	// default Config.Pipeline.MaxInFlightEvents.
	MaxInFlight int
}

// Run recovers the gap of the slot of Config (see the package comment).
// It returns the report and, on failure, an error naming the fix; a
// failure after the slot was created leaves the row marked, so walpost run
// refuses it and a second Run starts over.
func (r *Recoverer) Run(ctx context.Context, opts Options) (*Report, error) {
	cfg := r.Config
	log := r.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	name := cfg.Postgres.Slot
	eos := cfg.Delivery.Mode == config.ExactlyOnce
	rep := &Report{DryRun: opts.DryRun, Slot: name, ExactlyOnce: eos}
	if eos && !opts.DryRun && !opts.AllowDuplicates {
		return rep, errNeedsAllowDuplicates
	}

	side, err := replication.ConnectSQL(ctx, cfg.Postgres.URL)
	if err != nil {
		return rep, redact.Error(fmt.Errorf("connect to postgres.url: %w", err))
	}
	defer side.Close(context.Background())
	rc := &recovery{r: r, cfg: cfg, log: log, opts: opts, name: name, eos: eos, rep: rep, side: side}
	if err := rc.loadPosition(ctx); err != nil {
		return rep, err
	}

	repl, err := replication.ConnectReplication(ctx, cfg.Postgres.URL)
	if err != nil {
		return rep, redact.Error(fmt.Errorf("replication connection: %w", replication.Explain(err, name, cfg.Postgres.Publication)))
	}
	defer repl.Close(context.Background())
	if err := rc.checkSlot(ctx, repl); err != nil {
		return rep, err
	}
	if err := rc.plan(ctx); err != nil {
		return rep, err
	}

	if opts.DryRun {
		if err := scan(ctx, side, rc.q, rc.args, rep, rc.last, 0, nil); err != nil {
			return rep, err
		}
		return rep, nil
	}
	return rep, rc.recover(ctx, repl)
}

// recovery is the state one Run shares between its steps.
type recovery struct {
	r    *Recoverer
	cfg  *config.Config
	log  *slog.Logger
	opts Options
	name string
	eos  bool
	rep  *Report
	side *pgx.Conn

	table replication.TableName
	store *position.Store
	row   position.Row
	found bool
	id    position.Identity
	// drop: the existing slot is unusable and is dropped before the new one is created.
	drop bool
	// last is the recorded last commit; q and args select the gap's rows.
	last time.Time
	q    string
	args []any
}

// loadPosition checks the outbox table and loads the slot's recorded position.
func (rc *recovery) loadPosition(ctx context.Context) error {
	cfg, rep, side := rc.cfg, rc.rep, rc.side
	table, err := replication.ResolveTable(ctx, side, cfg.Postgres.Table)
	if err != nil {
		return err
	}
	rc.table = table
	rep.Table = table.String()
	if cfg.Mapping.Profile != config.ProfileWalpost {
		return fmt.Errorf("walpost recover reads walpost's outbox layout only; mapping.profile (WALPOST_MAPPING_PROFILE) is %q: recover the gap by hand (see the README runbook, \"Slot lost\")", cfg.Mapping.Profile)
	}
	if err := replication.CheckColumns(ctx, side, table, replication.Columns{}); err != nil {
		return err
	}
	if err := replication.CheckPublication(ctx, side, cfg.Postgres.Publication, table); err != nil {
		return err
	}
	rc.store = position.NewStore(side)
	row, found, err := rc.store.Load(ctx, rc.name)
	if err != nil {
		return err
	}
	rc.row, rc.found = row, found
	rep.Old, rep.HadRow = row, found
	if !found && rc.opts.Since.IsZero() {
		return fmt.Errorf("%w: no position is recorded for slot %q in %s, so where the gap starts is unknown: give --since TIME (RFC 3339, or a duration such as 2h for that long ago), the commit time from which outbox rows are sent again", ErrRefused, rc.name, position.Table)
	}
	return nil
}

// checkSlot identifies the server and decides whether the existing slot is recovered.
func (rc *recovery) checkSlot(ctx context.Context, repl *pgconn.PgConn) error {
	rep, name, row, found := rc.rep, rc.name, rc.row, rc.found
	id, err := position.Identify(ctx, repl)
	if err != nil {
		return err
	}
	rc.id = id
	rep.Server = id
	if found && row.SystemID != id.SystemID && !rc.opts.AllowOtherSystem {
		return fmt.Errorf("%w: postgres.url reaches %s, but the position of slot %q was recorded on system identifier %d (%s). If postgres.url is wrong, correct it. If the database really moved here (a restore, pg_upgrade), the recorded LSN means nothing on this server: run walpost recover --allow-other-system, which re-sends the rows committed after the recorded commit time",
			ErrRefused, id, name, row.SystemID, row.Last())
	}

	slot, err := replication.ReadSlot(ctx, rc.side, name)
	if err != nil {
		return err
	}
	switch {
	case !slot.Exists:
		rep.SlotState = "missing"
	case slot.Active:
		return fmt.Errorf("%w: slot %q is in use by PostgreSQL backend pid %d: stop the process streaming from it first", ErrRefused, name, slot.ActivePID)
	case slot.Invalidated():
		rep.SlotState, rc.drop = strings.TrimPrefix(slot.InvalidatedWhy(), "was "), true
	case found && !row.RecoveringSince.IsZero():
		rep.SlotState, rc.drop = fmt.Sprintf("left by a recovery started at %s that did not finish", row.RecoveringSince.UTC().Format(time.RFC3339)), true
	default:
		return fmt.Errorf("%w: slot %q exists and is usable (confirmed_flush_lsn %s, wal_status %s): walpost run streams from it, there is no gap to close. To re-send from an earlier time anyway, drop the slot first (SELECT pg_drop_replication_slot('%s')) with walpost stopped",
			ErrNothingToRecover, name, slot.ConfirmedFlush, slot.WALStatus, name)
	}
	return nil
}

// plan chooses the gap's window and builds the query that selects its rows.
func (rc *recovery) plan(ctx context.Context) error {
	side, rep, row := rc.side, rc.rep, rc.row
	var commitTS bool
	if err := side.QueryRow(ctx, `SELECT current_setting('track_commit_timestamp') = 'on'`).Scan(&commitTS); err != nil {
		return fmt.Errorf("read track_commit_timestamp: %w", err)
	}
	rc.last = row.LastCommit
	// A snapshot says something only about the system it was taken on,
	// and only when the server's transactions are not behind it (a
	// restore to an earlier point).
	if row.Snapshot != "" {
		var ahead bool
		err := side.QueryRow(ctx, `SELECT pg_snapshot_xmax($1::pg_snapshot) > pg_snapshot_xmax(pg_current_snapshot())`, row.Snapshot).Scan(&ahead)
		if !snapshotUsable(row, rc.id, err == nil && !ahead) {
			row.Snapshot, row.NextSnapshot = "", ""
		}
	}
	rep.By, rep.CommitFrom, rep.CreatedFrom = window(row, rc.opts.Since, commitTS, rc.cfg.Recover.Margin)
	if rep.By == BySnapshot {
		rep.SnapshotFrom, rep.SnapshotLSN, rep.maybeFrom = row.Snapshot, row.SnapshotLSN, row.NextSnapshot
	}
	if rc.drop && rc.opts.DryRun {
		rep.SlotState += ": would be dropped and created again"
	} else if rc.drop {
		rep.SlotState += ": dropped and created again"
	}
	cols, err := replication.TableColumns(ctx, side, rc.table)
	if err != nil {
		return fmt.Errorf("read columns of %s: %w", rc.table, err)
	}
	rc.q, rc.args = selection(rc.table, cols, commitTS, rep)
	return nil
}

// recover replaces the slot, produces the gap's rows from its snapshot and records the new position.
func (rc *recovery) recover(ctx context.Context, repl *pgconn.PgConn) error {
	cfg, log, rep, name, id, store := rc.cfg, rc.log, rc.rep, rc.name, rc.id, rc.store
	var txs *kafka.Sink
	if rc.eos {
		// Before anything is changed: Kafka or the checkpoint topic being
		// unusable fails the run here.
		var err error
		if txs, err = openTxn(ctx, cfg, id, log); err != nil {
			return fmt.Errorf("exactly-once: %w; nothing was changed", err)
		}
		defer txs.Close()
		if err := setTableTypes(ctx, rc.side, rc.table, cfg.Mapping, txs); err != nil {
			return fmt.Errorf("exactly-once: %w; nothing was changed", err)
		}
		rep.CheckpointTopic = cfg.Kafka.CheckpointTopic
	}
	if err := rc.markRecovering(ctx); err != nil {
		return err
	}
	cp, err := rc.createSlot(ctx, repl)
	if err != nil {
		return err
	}

	tx, err := rc.side.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("begin the snapshot transaction: %w", err)
	}
	defer tx.Rollback(context.Background())
	snapAt, snapshot, err := importSnapshot(ctx, tx, rep.Snapshot)
	if err != nil {
		return err
	}
	p := &producer{sink: rc.r.Sink, max: rc.r.MaxInFlight}
	if p.max <= 0 {
		p.max = cfg.Pipeline.MaxInFlightEvents
	}
	p.init()
	emit, finish := p.produce, p.wait
	if rc.eos {
		// The last transaction commits the checkpoint at the new
		// position, before the row is reset to it.
		p.sink = txs
		ts := newTxnSender(p, txs, cfg.Delivery.TransactionRecords, name, id)
		defer ts.abort(ctx, cfg.Kafka.FlushTimeout, log)
		rep.Checkpoint = checkpointAt(name, id, cp)
		emit = ts.produce
		finish = func(ctx context.Context) error {
			err := ts.finish(ctx, rep.Checkpoint)
			rep.Txns = ts.txns
			return err
		}
	}
	if err := scan(ctx, tx, rc.q, rc.args, rep, rc.last, cp, emit); err != nil {
		return err
	}
	if err := finish(ctx); err != nil {
		return fmt.Errorf("%w; nothing is recorded: slot %q stays marked in %s and walpost run refuses it; fix the cause and run walpost recover again", err, name, position.Table)
	}
	rep.Produced = p.acked
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("end the snapshot transaction: %w", err)
	}
	// Everything committed before the consistent point is in Kafka: that
	// is the new position, and the snapshot's start bounds its commits.
	// The exported snapshot is the new position's: every transaction it
	// shows is in Kafka now, the others are the slot's to stream.
	rep.New = position.Row{Slot: name, Identity: id, LSN: cp, LastCommit: snapAt, Snapshot: snapshot, SnapshotLSN: cp}
	if err := store.Reset(ctx, rep.New); err != nil {
		return fmt.Errorf("%w; the gap's rows are in Kafka, run walpost recover again to record the position (it sends them once more)", err)
	}
	log.Info("recovered the gap", "slot", name, "lsn", cp.String(), "found", rep.Found, "produced", rep.Produced, "resent", rep.Resent, "kafka_transactions", rep.Txns)
	return nil
}

// markRecovering marks the position row so walpost run refuses the slot, then drops an unusable slot.
func (rc *recovery) markRecovering(ctx context.Context) error {
	name := rc.name
	if !rc.found {
		// A row to mark: without one, a recovery that stopped after
		// creating the slot would look like a first install to walpost run.
		if err := rc.store.Reset(ctx, position.Row{Slot: name, Identity: rc.id}); err != nil {
			return err
		}
	}
	if err := rc.store.MarkRecovering(ctx, name); err != nil {
		return err
	}
	if rc.drop {
		if _, err := rc.side.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, name); err != nil {
			return fmt.Errorf("drop slot %q: %w", name, replication.Explain(err, name, rc.cfg.Postgres.Publication))
		}
		rc.log.Info("dropped the unusable slot", "slot", name, "state", rc.rep.SlotState)
	}
	return nil
}

// createSlot creates the slot with an exported snapshot and returns its consistent point.
func (rc *recovery) createSlot(ctx context.Context, repl *pgconn.PgConn) (pglogrepl.LSN, error) {
	name := rc.name
	// The slot's consistent point and the snapshot are one instant: rows
	// committed before it are visible in the snapshot, later ones are
	// streamed by the slot. The replication connection must run nothing
	// else until the snapshot is imported and read.
	created, err := pglogrepl.CreateReplicationSlot(ctx, repl, name, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{SnapshotAction: "EXPORT_SNAPSHOT", Mode: pglogrepl.LogicalReplication})
	if err != nil {
		return 0, fmt.Errorf("create slot %q with an exported snapshot: %w", name, replication.Explain(err, name, rc.cfg.Postgres.Publication))
	}
	cp, err := pglogrepl.ParseLSN(created.ConsistentPoint)
	if err != nil {
		return 0, fmt.Errorf("create slot %q: consistent point %q: %w", name, created.ConsistentPoint, err)
	}
	rc.rep.Snapshot = created.SnapshotName
	rc.log.Info("created the slot with an exported snapshot", "slot", name, "lsn", cp.String(), "snapshot", created.SnapshotName)
	return cp, nil
}

// importSnapshot makes tx read the exported snapshot and returns its time and its pg_current_snapshot.
func importSnapshot(ctx context.Context, tx pgx.Tx, name string) (time.Time, string, error) {
	var snapAt time.Time
	var snapshot string
	if _, err := tx.Exec(ctx, `SET TRANSACTION SNAPSHOT '`+strings.ReplaceAll(name, "'", "''")+`'`); err != nil {
		return snapAt, snapshot, fmt.Errorf("import snapshot %s: %w", name, err)
	}
	// The created_at header is rendered from PostgreSQL's ISO text in UTC,
	// as on the replication connection.
	if _, err := tx.Exec(ctx, `SET LOCAL DateStyle = 'ISO'; SET LOCAL TimeZone = 'UTC'`); err != nil {
		return snapAt, snapshot, err
	}
	if err := tx.QueryRow(ctx, `SELECT now(), pg_current_snapshot()::text`).Scan(&snapAt, &snapshot); err != nil {
		return snapAt, snapshot, err
	}
	return snapAt, snapshot, nil
}

// snapshotUsable says whether row's recorded snapshot may choose the gap's
// rows on the server id: only on the system it was taken on (a restore
// or logical copy elsewhere has unrelated transaction ids, all below the
// snapshot's), and only when the server's transactions are not behind it
// (notBehind: its xmax is at or below the server's).
func snapshotUsable(row position.Row, id position.Identity, notBehind bool) bool {
	return row.Snapshot != "" && row.SystemID == id.SystemID && notBehind
}

// window chooses how the gap's rows are selected after row (the recorded
// position): By and the lower bounds of their commit timestamp and of
// their created_at (both zero with ByAll: no bound).
func window(row position.Row, since time.Time, commitTS bool, margin time.Duration) (by By, commitFrom, createdFrom time.Time) {
	last := row.LastCommit
	switch {
	case !since.IsZero():
		return BySince, since, since
	case last.IsZero():
		// No transaction was ever confirmed, so every row may be in the
		// gap. The row's updated_at bounds nothing: every forward write of
		// the row refreshes it, a keepalive-only one too, after outbox
		// transactions it never confirmed.
		return ByAll, time.Time{}, time.Time{}
	case commitTS:
		return ByCommitTimestamp, last.Add(-CommitSlack), last.Add(-margin)
	case row.Snapshot != "":
		// No clock: the transactions the recorded snapshot does not show.
		return BySnapshot, time.Time{}, time.Time{}
	default:
		return ByCreatedAt, time.Time{}, last.Add(-margin)
	}
}

// selection is the query of the gap's rows and its arguments, in commit
// order (or created_at order without commit timestamps; within a
// transaction in insert order): every row of the table with ByAll, else
// the rows at or after rep's bounds.
func selection(t replication.TableName, cols []string, commitTS bool, rep *Report) (string, []any) {
	opt := func(c, cast string) string {
		if slices.Contains(cols, c) {
			return pgx.Identifier{c}.Sanitize() + cast
		}
		return "NULL::text"
	}
	ts := "NULL::timestamptz"
	if commitTS {
		ts = "pg_xact_commit_timestamp(xmin)"
	}
	args := []any{rep.CommitFrom, rep.CreatedFrom}
	var where string
	from := t.String()
	// maybe: the row's transaction may have been delivered before (it is
	// counted as re-sent).
	maybe := "false"
	switch {
	case rep.By == ByAll:
		where, args = `true`, nil
	case rep.By == BySnapshot:
		// xmin is 32 bits: it is placed in the epoch of the reading
		// transaction's snapshot (every row not frozen is within 2^31
		// transactions of it), then compared with the recorded 64-bit
		// snapshot. A frozen row older than 2^32 transactions may alias
		// to a recent one and is sent again, never missed.
		//
		// Chosen: every row whose xmin is at or above the snapshot's
		// xmin, not only those the snapshot does not show. A row
		// inserted under a savepoint has its subtransaction's xid as
		// xmin, and a snapshot lists top-level xids only: the subxid of
		// a transaction in progress at the snapshot, below its xmax and
		// not in its list, reads as completed
		// (pg_visible_in_snapshot "will not give the correct answer for
		// a subtransaction ID"). Below the snapshot's xmin every
		// transaction, and so every subtransaction (its xid is above its
		// parent's), had ended. The rows of transactions that ended
		// between the snapshot's xmin and xmax are sent again.
		from += `, (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax) ref`
		x8 := `(((ref.xmax >> 32) << 32 | xmin::text::bigint) - CASE WHEN ((ref.xmax >> 32) << 32 | xmin::text::bigint) > ref.xmax THEN 4294967296 ELSE 0 END)::text::xid8`
		where = x8 + ` >= pg_snapshot_xmin($3::pg_snapshot) AND $1::timestamptz IS NOT NULL AND $2::timestamptz IS NOT NULL`
		args = append(args, rep.SnapshotFrom)
		// Re-sent, at most: the rows the recorded snapshot reads as
		// completed (delivered, or a subtransaction's), and those of
		// transactions the last candidate shows.
		maybe = `pg_visible_in_snapshot(` + x8 + `, $3::pg_snapshot)`
		if rep.maybeFrom != "" {
			maybe = `(` + maybe + ` OR pg_visible_in_snapshot(` + x8 + `, $4::pg_snapshot))`
			args = append(args, rep.maybeFrom)
		}
	case commitTS:
		where = `(` + ts + ` >= $1 OR (` + ts + ` IS NULL AND created_at >= $2))`
	default:
		// $1 (the commit bound) is unused without commit timestamps; it
		// is named so that PostgreSQL knows its type.
		where = `created_at >= $2 AND $1::timestamptz IS NOT NULL`
	}
	at := "COALESCE(" + ts + ", created_at)"
	return `SELECT id::text, idempotency_key, payload::text, created_at::text,
       CASE WHEN isfinite(created_at) THEN created_at END, ` + ts + `,
       xmin::text::bigint, ` + opt("topic", "::text") + `, ` + opt("partition_key", "::text") + `, ` +
		opt("event_type", "::text") + `, ` + opt("headers", "::text") + `,
       CASE WHEN isfinite(` + at + `) THEN ` + at + ` END, ` + maybe + `
FROM ` + from + `
WHERE ` + where + `
ORDER BY ` + at + `, xmin::text::bigint, cmin::text::bigint, ctid`, args
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// scan reads the chosen rows, counts them into rep and hands each event to
// emit (nil: count only).
//
// A row's commit LSN is not in the table: each event carries the new
// slot's consistent point cp (every row of the snapshot committed before
// it, every streamed transaction commits after it), so a consumer that
// orders or deduplicates by the commit_lsn header never sees a recovered
// record go back behind one streamed before or after it.
func scan(ctx context.Context, q querier, sql string, args []any, rep *Report, last time.Time, cp pglogrepl.LSN, emit func(context.Context, *outbox.Event) error) error {
	var oldest *time.Time
	if err := q.QueryRow(ctx, `SELECT min(created_at) FROM `+rep.Table).Scan(&oldest); err != nil {
		return fmt.Errorf("read the oldest row of %s: %w", rep.Table, err)
	}
	if oldest != nil {
		rep.Oldest = *oldest
	}
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("read the gap's rows from %s: %w", rep.Table, err)
	}
	defer rows.Close()
	var prevXID int64 = -1
	seq := 0
	for rows.Next() {
		var (
			ev                          outbox.Event
			payload, topic, pkey, etype *string
			headers                     *string
			created, commit, at         *time.Time
			xid                         int64
			maybe                       bool
		)
		if err := rows.Scan(&ev.ID, &ev.IdempotencyKey, &payload, &ev.CreatedAt, &created, &commit, &xid, &topic, &pkey, &etype, &headers, &at, &maybe); err != nil {
			return fmt.Errorf("read the gap's rows from %s: %w", rep.Table, err)
		}
		rep.Found++
		if at != nil {
			if rep.First.IsZero() {
				rep.First = *at
			}
			rep.Last = *at
			if rep.By != BySnapshot && !at.After(last) {
				rep.Resent++
			}
		}
		if maybe {
			rep.Resent++
		}
		if emit == nil {
			continue
		}
		if payload != nil {
			ev.Payload = []byte(*payload)
		}
		if topic != nil {
			ev.Topic = *topic
		}
		if pkey != nil {
			ev.PartitionKey, ev.HasPartition = *pkey, true
		}
		if etype != nil {
			ev.EventType = *etype
		}
		if headers != nil {
			ev.Headers = []byte(*headers)
		}
		switch {
		case commit != nil:
			ev.CommitTime = *commit
		case created != nil:
			ev.CommitTime = *created
		default:
			ev.CommitTime = time.Now()
		}
		ev.XID = uint32(xid)
		ev.CommitLSN = cp
		if xid != prevXID {
			prevXID, seq = xid, 0
		}
		ev.Seq = seq
		seq++
		ev.Recovered = true
		if err := emit(ctx, &ev); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the gap's rows from %s: %w", rep.Table, err)
	}
	return nil
}

// producer produces events in order with at most max unacknowledged.
type producer struct {
	sink  sink.Sink
	max   int
	slots chan struct{}

	mu     sync.Mutex
	acked  int
	failed []string // "key: error", the first few
	nfail  int
}

func (p *producer) init() { p.slots = make(chan struct{}, p.max) }

func (p *producer) produce(ctx context.Context, ev *outbox.Event) error {
	if err := p.err(); err != nil {
		return err
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	key := ev.IdempotencyKey
	p.sink.Produce(ev, sink.AckFunc(func(_ sink.Result, err error) {
		p.mu.Lock()
		if err != nil {
			p.nfail++
			if len(p.failed) < 5 {
				p.failed = append(p.failed, key+": "+err.Error())
			}
		} else {
			p.acked++
		}
		p.mu.Unlock()
		<-p.slots
	}))
	return nil
}

func (p *producer) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.nfail == 0 {
		return nil
	}
	return fmt.Errorf("kafka refused %d recovered record(s), e.g. %s (a row walpost cannot build, such as a NULL payload or headers that are not an object of strings, must be corrected in the outbox table; a record too large needs a larger max.message.bytes)",
		p.nfail, strings.Join(p.failed, "; "))
}

// wait flushes the sink: every produced record has its outcome.
func (p *producer) wait(ctx context.Context) error {
	if err := p.sink.Flush(ctx); err != nil {
		return fmt.Errorf("wait for Kafka's acknowledgements: %w", err)
	}
	return p.err()
}

// setTableTypes gives s the table's column types (kafkaconf.SetTableTypes):
// a bytea payload is produced as its bytes, as walpost run does.
func setTableTypes(ctx context.Context, q replication.Querier, table replication.TableName, m config.Mapping, s *kafka.Sink) error {
	types, err := replication.ColumnTypes(ctx, q, table)
	if err != nil {
		return fmt.Errorf("read column types of %s: %w", table, err)
	}
	return kafkaconf.SetTableTypes(s, m, kafkaconf.Lookup(types))
}
