// Package prune is `walpost prune`: it deletes outbox rows that are old
// enough and whose transactions walpost confirmed, in batches that each
// hold their row locks for one short transaction (DESIGN.md, "Recovery").
//
// Confirmed means at or before walpost's recorded position
// (walpost_position): a row's commit timestamp at or before the recorded
// last commit time minus recovery.CommitSlack when track_commit_timestamp
// is on, else (and for rows without a commit timestamp) its created_at
// before that time minus recover.margin. The rows after the position are
// the ones walpost recover needs when the slot is lost, so prune never
// deletes them; without a recorded position it deletes nothing. It never
// touches the poison table.
package prune

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/replication"
)

// commitSlack is recovery.CommitSlack (prune does not import recovery).
const commitSlack = time.Second

// ErrRefused: prune will not run as configured; the message names the fix.
var ErrRefused = errors.New("walpost prune refused")

// Options are the command's flags.
type Options struct {
	// OlderThan: only rows created more than this long ago. Above 0.
	OlderThan time.Duration
	// Batch is the most rows one transaction deletes. Default 1000.
	Batch int
	// DryRun counts what would be deleted.
	DryRun bool
}

// Report is what prune did.
type Report struct {
	DryRun bool
	Table  string
	// CreatedBefore is the created_at bound: now − OlderThan, or the
	// recorded last commit − recover.margin when that is earlier (for
	// rows without a commit timestamp).
	CreatedBefore time.Time
	// CommitAtOrBefore, with commit timestamps, bounds a row's commit
	// timestamp: the recorded last commit − the slack.
	CommitAtOrBefore time.Time
	ByCommitTS       bool
	Position         position.Row
	// Deleted rows (with DryRun: that would be deleted now) in Batches
	// transactions; LongestBatch is the longest of them.
	Deleted, Batches int
	LongestBatch     time.Duration
}

// Write renders the report.
func (r *Report) Write(w io.Writer) error {
	pr := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	pr("table:             %s", r.Table)
	pr("recorded position: %s", r.Position.Last())
	if r.ByCommitTS {
		pr("bound:             created before %s and committed at or before %s (rows without a commit timestamp: created before %s)",
			utc(r.CreatedBefore), utc(r.CommitAtOrBefore), utc(r.CreatedBefore))
	} else {
		pr("bound:             created before %s (--older-than, and the last confirmed commit minus recover.margin)", utc(r.CreatedBefore))
	}
	if r.DryRun {
		pr("dry run:           %d row(s) would be deleted", r.Deleted)
		return nil
	}
	pr("deleted:           %d row(s) in %d batch(es), the longest took %s", r.Deleted, r.Batches, r.LongestBatch.Round(time.Millisecond))
	return nil
}

func utc(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// Pruner runs walpost prune.
type Pruner struct {
	Config *config.Config
	Logger *slog.Logger
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
}

// ErrNothingConfirmed marks a refusal a running walpost outgrows (it also
// matches ErrRefused): no position is recorded for the slot yet, or it
// records no confirmed transaction, so nothing may be deleted yet.
var ErrNothingConfirmed = errors.New("nothing confirmed yet")

// notYet is a refusal that also matches ErrNothingConfirmed; its message is
// the refusal's own.
type notYet struct{ error }

func (e notYet) Unwrap() error        { return e.error }
func (e notYet) Is(target error) bool { return target == ErrNothingConfirmed }

// Run prunes the outbox of Config over a connection of its own, after
// checking over a replication connection that postgres.url reaches the
// system the position was recorded on (walpost prune).
func (p *Pruner) Run(ctx context.Context, opts Options) (*Report, error) {
	cfg := p.Config
	opts, err := opts.check()
	if err != nil {
		return nil, err
	}
	conn, err := replication.ConnectSQL(ctx, cfg.Postgres.URL)
	if err != nil {
		return &Report{DryRun: opts.DryRun}, redact.Error(fmt.Errorf("connect to postgres.url: %w", err))
	}
	defer conn.Close(context.Background())
	return p.prune(ctx, conn, opts, func(ctx context.Context) (position.Identity, error) {
		repl, err := replication.ConnectReplication(ctx, cfg.Postgres.URL)
		if err != nil {
			return position.Identity{}, redact.Error(fmt.Errorf("replication connection: %w", replication.Explain(err, cfg.Postgres.Slot, cfg.Postgres.Publication)))
		}
		defer repl.Close(context.Background())
		return position.Identify(ctx, repl)
	})
}

// Pass prunes the outbox of Config once over conn (a running walpost's
// side pool: outbox.retention), on the server identity id that the
// caller's replication session verified; it is otherwise Run, with the
// same bounds and refusals.
func (p *Pruner) Pass(ctx context.Context, conn *pgx.Conn, id position.Identity, opts Options) (*Report, error) {
	opts, err := opts.check()
	if err != nil {
		return nil, err
	}
	return p.prune(ctx, conn, opts, func(context.Context) (position.Identity, error) { return id, nil })
}

// check applies the default batch and refuses out-of-range options.
func (opts Options) check() (Options, error) {
	if opts.OlderThan <= 0 {
		return opts, fmt.Errorf("%w: --older-than %s: want a positive duration, e.g. 168h for 7 days", ErrRefused, opts.OlderThan)
	}
	if opts.Batch == 0 {
		opts.Batch = DefaultBatch
	}
	if opts.Batch < 1 || opts.Batch > MaxBatch {
		return opts, fmt.Errorf("%w: --batch %d: want 1 to %d rows per transaction", ErrRefused, opts.Batch, MaxBatch)
	}
	return opts, nil
}

// IdleTimeout is how long the server lets a batch's transaction wait,
// idle, for its client's next statement before it ends it (see
// deleteBatches). A batch never waits on its client between its
// statements, so the bound only ends a transaction whose connection
// was cut off. Tests shorten it.
var IdleTimeout = defaultIdleTimeout

const defaultIdleTimeout = 30 * time.Second

// idleBound is IdleTimeout, or the default when it is not a whole
// millisecond or more (0 would disable the bound).
func idleBound() time.Duration {
	if IdleTimeout < time.Millisecond {
		return defaultIdleTimeout
	}
	return IdleTimeout
}

// DefaultBatch and MaxBatch bound Options.Batch.
const (
	DefaultBatch = 1000
	MaxBatch     = 100000
)

// prune deletes over conn; identify says which system conn is on.
func (p *Pruner) prune(ctx context.Context, conn *pgx.Conn, opts Options, identify func(context.Context) (position.Identity, error)) (*Report, error) {
	cfg := p.Config
	log := p.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	rep := &Report{DryRun: opts.DryRun}
	table, err := replication.ResolveTable(ctx, conn, cfg.Postgres.Table)
	if err != nil {
		return rep, err
	}
	rep.Table = table.String()
	if poisonT, err := replication.ResolveTable(ctx, conn, cfg.Postgres.PoisonTable); err == nil && poisonT == table {
		return rep, fmt.Errorf("%w: postgres.table and postgres.poison_table are both %s: prune never deletes from the poison table", ErrRefused, table)
	}
	row, err := p.checkPosition(ctx, conn, identify, rep)
	if err != nil {
		return rep, err
	}
	if err := conn.QueryRow(ctx, `SELECT current_setting('track_commit_timestamp') = 'on'`).Scan(&rep.ByCommitTS); err != nil {
		return rep, fmt.Errorf("read track_commit_timestamp: %w", err)
	}
	rep.CreatedBefore = now().Add(-opts.OlderThan)
	if b := row.LastCommit.Add(-cfg.Recover.Margin); b.Before(rep.CreatedBefore) && !rep.ByCommitTS {
		rep.CreatedBefore = b
	}
	rep.CommitAtOrBefore = row.LastCommit.Add(-commitSlack)
	// $2 (the commit bound) is unused without commit timestamps; it is
	// named so that PostgreSQL knows its type.
	where := `created_at < $1 AND $2::timestamptz IS NOT NULL`
	if rep.ByCommitTS {
		margin := row.LastCommit.Add(-cfg.Recover.Margin)
		ts := `pg_xact_commit_timestamp(xmin)`
		where = fmt.Sprintf(`created_at < $1 AND (%s <= $2 OR (%s IS NULL AND created_at < '%s'::timestamptz))`, ts, ts, margin.UTC().Format(time.RFC3339Nano))
	}
	if opts.DryRun {
		var n int64
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+rep.Table+` WHERE `+where, rep.CreatedBefore, rep.CommitAtOrBefore).Scan(&n); err != nil {
			return rep, fmt.Errorf("count rows of %s: %w", rep.Table, err)
		}
		rep.Deleted = int(n)
		return rep, nil
	}
	if err := deleteBatches(ctx, conn, where, opts.Batch, rep, log); err != nil {
		return rep, err
	}
	level := slog.LevelDebug // nothing to delete: no line at info
	if rep.Deleted > 0 {
		level = slog.LevelInfo
	}
	attrs := []any{"table", rep.Table, "slot", cfg.Postgres.Slot, "deleted", rep.Deleted, "batches", rep.Batches, "longest_batch", rep.LongestBatch.String(),
		"created_before", utc(rep.CreatedBefore), "position_lsn", row.LSN.String(), "last_commit", utc(row.LastCommit)}
	if rep.ByCommitTS {
		attrs = append(attrs, "committed_at_or_before", utc(rep.CommitAtOrBefore))
	}
	log.Log(ctx, level, "pruned the outbox", attrs...)
	return rep, nil
}

// checkPosition loads the slot's recorded position and refuses to prune
// unless it confirmed transactions on the system conn is on.
func (p *Pruner) checkPosition(ctx context.Context, conn *pgx.Conn, identify func(context.Context) (position.Identity, error), rep *Report) (position.Row, error) {
	cfg := p.Config
	row, found, err := position.NewStore(conn).Load(ctx, cfg.Postgres.Slot)
	if err != nil {
		return row, err
	}
	rep.Position = row
	switch {
	case !found:
		return row, notYet{fmt.Errorf("%w: no position is recorded for slot %q in %s: prune deletes only rows walpost confirmed; start walpost run (it records the position) or check postgres.slot", ErrRefused, cfg.Postgres.Slot, position.Table)}
	case !row.RecoveringSince.IsZero():
		return row, fmt.Errorf("%w: a walpost recover of slot %q started at %s did not finish: the rows it needs stay; run walpost recover first", ErrRefused, cfg.Postgres.Slot, utc(row.RecoveringSince))
	case row.LastCommit.IsZero():
		return row, notYet{fmt.Errorf("%w: walpost has not confirmed any transaction on slot %q yet (%s): nothing is confirmed to delete", ErrRefused, cfg.Postgres.Slot, row.Last())}
	}
	id, err := identify(ctx)
	if err != nil {
		return row, err
	}
	if id.SystemID != row.SystemID {
		return row, fmt.Errorf("%w: postgres.url reaches %s, but the position of slot %q was recorded on system identifier %d: what it confirmed says nothing about this server's rows; run walpost recover (README, Runbook) first", ErrRefused, id, cfg.Postgres.Slot, row.SystemID)
	}
	return row, nil
}

// deleteBatches deletes the rows matching where, in batches of batch rows, until a batch comes back short.
func deleteBatches(ctx context.Context, conn *pgx.Conn, where string, batch int, rep *Report, log *slog.Logger) error {
	// One statement per batch, in its own transaction: it locks at most
	// Batch rows, skips rows another transaction has locked, and never
	// blocks inserts (ROW EXCLUSIVE on the table, like an INSERT). It
	// never waits long behind a lock (DDL on the outbox): it gives up the
	// batch and says so. The server ends the batch's transaction when
	// its client leaves it idle for IdleTimeout: a connection cut off
	// between the DELETE and the COMMIT (half-open: the server does not
	// notice for hours) would hold the batch's row locks, its xid (a
	// CREATE_REPLICATION_SLOT, walpost recover's, waits for it) and the
	// xmin horizon until then. set_config(…, true) is SET LOCAL: the
	// settings end with the batch, so a pooled connection goes back to
	// the pool as it came.
	del := `DELETE FROM ` + rep.Table + ` WHERE ctid = ANY(ARRAY(SELECT ctid FROM ` + rep.Table + ` WHERE ` + where + ` LIMIT $3 FOR UPDATE SKIP LOCKED))`
	for {
		start := time.Now()
		var n int
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', '2s', true), set_config('idle_in_transaction_session_timeout', $1, true)`,
				strconv.FormatInt(idleBound().Milliseconds(), 10)); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, del, rep.CreatedBefore, rep.CommitAtOrBefore, batch)
			n = int(tag.RowsAffected())
			return err
		})
		took := time.Since(start)
		if err != nil {
			return fmt.Errorf("delete a batch from %s (after %d rows): %w", rep.Table, rep.Deleted, err)
		}
		if n == 0 {
			return nil
		}
		rep.Batches++
		rep.Deleted += n
		rep.LongestBatch = max(rep.LongestBatch, took)
		log.Debug("pruned a batch", "table", rep.Table, "rows", n, "took", took.String())
		if n < batch {
			return nil
		}
	}
}
