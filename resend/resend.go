package resend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/kafkaconf"
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink"
	"github.com/walpost/walpost/sink/kafka"
)

// ErrRefused: resend will not run as asked; the message names the flag
// or the fix.
var ErrRefused = errors.New("walpost resend refused")

// By names the time by which rows are chosen (--since, --until) and
// ordered.
type By string

const (
	// ByCommitTimestamp: pg_xact_commit_timestamp(xmin)
	// (track_commit_timestamp = on); rows without one (committed before
	// it was turned on, or frozen) by created_at.
	ByCommitTimestamp By = "commit timestamp"
	// ByCreatedAt: track_commit_timestamp is off.
	ByCreatedAt By = "created_at"
)

// ResumeSlack widens a resumed resend's upper bound (the first run's
// snapshot time, when it had no --until): a row's commit timestamp is
// taken just before its commit, so a row visible in that snapshot may
// carry a timestamp a little after it.
const ResumeSlack = time.Second

// Options are the command's flags.
type Options struct {
	// Since and Until bound the rows' time (By): at or after Since,
	// before Until; zero is no bound (Until: the snapshot).
	Since, Until time.Time
	// Keys, when not empty, are the only idempotency keys resent.
	Keys []string
	// Where is a checked predicate (ParseWhere); nil: none.
	Where *Where
	// Topic, when set, receives every record instead of the row's topic
	// or kafka.topic.
	Topic string
	// DryRun counts the rows and their time range; nothing is produced
	// or written.
	DryRun bool
	// MaxRate caps the rows produced per second; 0 is no cap.
	MaxRate float64
	// Resume continues the resend recorded in ProgressFile, with its
	// selection, after its last acknowledged row.
	Resume bool
	// ProgressFile is where the resend records its selection and
	// progress (State). Required unless DryRun.
	ProgressFile string
}

var topicRE = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

// Check refuses flags that contradict each other or are malformed, before
// anything connects.
func (o Options) Check() error {
	switch {
	case o.MaxRate < 0 || math.IsNaN(o.MaxRate) || math.IsInf(o.MaxRate, 0) || (o.MaxRate > 0 && o.MaxRate < 0.01):
		return fmt.Errorf("%w: --max-rate %g: give rows per second from 0.01 up, or 0 for no limit", ErrRefused, o.MaxRate)
	case !o.Since.IsZero() && !o.Until.IsZero() && !o.Until.After(o.Since):
		return fmt.Errorf("%w: --until %s is not after --since %s: the window is empty", ErrRefused, o.Until.UTC().Format(time.RFC3339Nano), o.Since.UTC().Format(time.RFC3339Nano))
	case o.Topic != "" && (!topicRE.MatchString(o.Topic) || o.Topic == "." || o.Topic == ".."):
		return fmt.Errorf("%w: --topic %q: a Kafka topic name is 1-249 characters of [a-zA-Z0-9._-]", ErrRefused, o.Topic)
	case slices.Contains(o.Keys, ""):
		return fmt.Errorf("%w: --key \"\": an idempotency key is never empty", ErrRefused)
	case o.Resume && (!o.Since.IsZero() || !o.Until.IsZero() || len(o.Keys) > 0 || o.Where != nil || o.Topic != ""):
		return fmt.Errorf("%w: --resume continues the resend recorded in --progress-file with its own selection: drop --since, --until, --key, --where and --topic (or remove the file to start another resend)", ErrRefused)
	case o.ProgressFile == "" && (!o.DryRun || o.Resume):
		return fmt.Errorf("%w: --progress-file is empty: give the file in which walpost resend records its progress (for --resume)", ErrRefused)
	}
	return nil
}

func (o Options) selection() Selection {
	s := Selection{Since: o.Since, Until: o.Until, Keys: o.Keys, Topic: o.Topic}
	if o.Where != nil {
		s.Where = o.Where.Text
	}
	return s
}

// Progress is the state of a running resend, for its progress line.
type Progress struct {
	Produced, Matched int64 // rows of this run
	Bytes             int64
	Elapsed           time.Duration
	At                time.Time // the time (By) of the last row read
}

func (p Progress) String() string {
	pct := 100.0
	if p.Matched > 0 {
		pct = 100 * float64(p.Produced) / float64(p.Matched)
	}
	return fmt.Sprintf("resend: %d of %d rows (%.0f%%), %s, %.0f rows/s, at %s",
		p.Produced, p.Matched, pct, byteSize(p.Bytes), rate(p.Produced, p.Elapsed), ts(p.At))
}

// Resender runs walpost resend.
type Resender struct {
	Config *config.Config
	// Sink receives the records: walpost's idempotent Kafka producer
	// (kafka.New of kafkaconf.ConfigFrom). Unused with DryRun and in
	// exactly-once mode, where Run opens a transactional producer of its
	// own (exactly.go).
	Sink   sink.Sink
	Logger *slog.Logger
	// OnProgress receives the progress every ProgressEvery (default 5 s)
	// while rows are produced; nil: none.
	OnProgress    func(Progress)
	ProgressEvery time.Duration
	// MaxInFlight bounds records produced and not yet acknowledged;
	// default Config.Pipeline.MaxInFlightEvents.
	MaxInFlight int
}

// saveEvery is how often the progress file is rewritten while rows are
// produced (and once at the end).
const saveEvery = time.Second

// Run resends the rows opts chooses (see the package comment) and returns
// the report; on failure the error says how far it got and how to go on.
func (r *Resender) Run(ctx context.Context, opts Options) (*Report, error) {
	cfg := r.Config
	log := r.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	eos := cfg.Delivery.Mode == config.ExactlyOnce
	rep := &Report{DryRun: opts.DryRun, ProgressFile: opts.ProgressFile, ExactlyOnce: eos && !opts.DryRun, Resumed: opts.Resume}
	if err := opts.Check(); err != nil {
		return rep, err
	}
	if cfg.Mapping.Profile != config.ProfileWalpost {
		return rep, fmt.Errorf("%w: walpost resend reads walpost's outbox layout only; mapping.profile (WALPOST_MAPPING_PROFILE) is %q", ErrRefused, cfg.Mapping.Profile)
	}
	st, err := r.prior(opts)
	if err != nil {
		return rep, err
	}
	sel, where, err := selection(opts, st, rep)
	if err != nil {
		return rep, err
	}

	side, err := replication.ConnectSQL(ctx, cfg.Postgres.URL)
	if err != nil {
		return rep, redact.Error(fmt.Errorf("connect to postgres.url: %w", err))
	}
	defer side.Close(context.Background())
	q, err := r.prepare(ctx, side, where, sel)
	if err != nil {
		return rep, err
	}
	rep.Table, rep.By = q.table.String(), q.by()
	if opts.Resume {
		if err := resumeAt(&q, st, rep, opts.ProgressFile); err != nil {
			return rep, err
		}
	}

	tx, err := side.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return rep, fmt.Errorf("begin the snapshot transaction: %w", err)
	}
	defer tx.Rollback(context.Background())
	if err := snapshot(ctx, tx, rep); err != nil {
		return rep, err
	}
	if err := count(ctx, tx, q, rep); err != nil {
		return rep, err
	}
	if opts.DryRun {
		return rep, nil
	}
	if opts.Resume {
		rep.SnapshotAt = st.SnapshotAt
	} else {
		st = &State{Version: stateVersion, Table: rep.Table, By: rep.By, Selection: sel, StartedAt: time.Now().UTC(), SnapshotAt: rep.SnapshotAt, Matched: rep.Matched}
	}
	return r.produce(ctx, tx, q, opts, st, rep, log)
}

// selection is what the resend chooses: the flags', or with --resume the
// recorded one (its predicate checked again: the file is text).
func selection(opts Options, st *State, rep *Report) (Selection, *Where, error) {
	sel, where := opts.selection(), opts.Where
	if opts.Resume {
		sel, rep.Before, rep.BeforeBytes = st.Selection, st.Produced, st.Bytes
		if sel.Where != "" {
			var err error
			if where, err = ParseWhere(sel.Where); err != nil {
				return sel, nil, fmt.Errorf("--progress-file %s: %w", opts.ProgressFile, err)
			}
		}
	}
	rep.Selection = sel
	return sel, where, nil
}

// resumeAt makes q continue the recorded resend st: after its row, up to
// its first snapshot (unless it had --until), over the same table in the
// same order.
func resumeAt(q *query, st *State, rep *Report, file string) error {
	if st.Table != rep.Table || st.By != rep.By {
		return fmt.Errorf("%w: --progress-file %s records a resend of %s ordered by %s, but postgres.table is %s ordered by %s now (track_commit_timestamp changed?): its position means nothing here; remove the file and start over", ErrRefused, file, st.Table, st.By, rep.Table, rep.By)
	}
	q.after = st.Cursor
	if st.Selection.Until.IsZero() {
		q.bound = st.SnapshotAt.Add(ResumeSlack)
	}
	return nil
}

// prior reads the progress file: the resend to resume, or (without
// --resume) one that did not finish, which is refused rather than
// overwritten.
func (r *Resender) prior(opts Options) (*State, error) {
	if opts.Resume {
		st, err := loadState(opts.ProgressFile)
		if err != nil {
			return nil, err
		}
		if st.Finished {
			return nil, fmt.Errorf("%w: the resend recorded in --progress-file %s finished (%d rows): there is nothing to resume; without --resume walpost resend starts a new one", ErrRefused, opts.ProgressFile, st.Produced)
		}
		return st, nil
	}
	if opts.DryRun {
		return nil, nil
	}
	st, err := loadState(opts.ProgressFile)
	if errors.Is(err, ErrNoProgress) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !st.Finished {
		return nil, fmt.Errorf("%w: --progress-file %s records a resend that did not finish (%d of %d rows, started %s): continue it with walpost resend --resume, or remove the file to start a new one", ErrRefused, opts.ProgressFile, st.Produced, st.Matched, ts(st.StartedAt))
	}
	return nil, nil
}

// prepare checks the table and the predicate's columns and returns the
// query of the selection.
func (r *Resender) prepare(ctx context.Context, side *pgx.Conn, where *Where, sel Selection) (query, error) {
	cfg := r.Config
	table, err := replication.ResolveTable(ctx, side, cfg.Postgres.Table)
	if err != nil {
		return query{}, err
	}
	if err := replication.CheckColumns(ctx, side, table, replication.Columns{}); err != nil {
		return query{}, err
	}
	cols, err := replication.TableColumns(ctx, side, table)
	if err != nil {
		return query{}, fmt.Errorf("read columns of %s: %w", table, err)
	}
	if where != nil {
		if err := where.CheckColumns(table.String(), cols); err != nil {
			return query{}, err
		}
	}
	var commitTS bool
	if err := side.QueryRow(ctx, `SELECT current_setting('track_commit_timestamp') = 'on'`).Scan(&commitTS); err != nil {
		return query{}, fmt.Errorf("read track_commit_timestamp: %w", err)
	}
	return query{table: table, cols: cols, commitTS: commitTS, sel: sel, where: where}, nil
}

// snapshot sets up the snapshot transaction and reads its time. Invariant
// 4: it is READ ONLY, so nothing --where calls can write; functions,
// operators and types resolve in pg_catalog only; and strings are lexed
// as ParseWhere lexed them (standard_conforming_strings: a backslash is
// an ordinary character, it never escapes a quote).
func snapshot(ctx context.Context, tx pgx.Tx, rep *Report) error {
	// created_at is rendered in PostgreSQL's ISO text in UTC, as on the
	// replication connection (the created_at header).
	if _, err := tx.Exec(ctx, `SET LOCAL search_path = pg_catalog; SET LOCAL standard_conforming_strings = on; SET LOCAL DateStyle = 'ISO'; SET LOCAL TimeZone = 'UTC'`); err != nil {
		return fmt.Errorf("set up the snapshot transaction: %w", err)
	}
	// The snapshot is taken by this first query.
	if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&rep.SnapshotAt); err != nil {
		return fmt.Errorf("take the snapshot: %w", err)
	}
	return nil
}

// count fills rep with the matching rows of the snapshot: how many, their
// bytes and their time range.
func count(ctx context.Context, tx pgx.Tx, q query, rep *Report) error {
	sql, args := q.countSQL()
	var first, last *time.Time
	if err := tx.QueryRow(ctx, sql, args...).Scan(&rep.Matched, &rep.MatchedBytes, &first, &last); err != nil {
		return q.explain(err)
	}
	if first != nil {
		rep.First = *first
	}
	if last != nil {
		rep.Last = *last
	}
	return nil
}

// produce sends the rows of q in order through the sink (in exactly-once
// mode a transactional producer of its own), recording the acknowledged
// prefix in the progress file.
func (r *Resender) produce(ctx context.Context, tx pgx.Tx, q query, opts Options, st *State, rep *Report, log *slog.Logger) (*Report, error) {
	cfg := r.Config
	em := &emitter{sink: r.Sink, front: &frontier{}}
	maxInFlight := r.MaxInFlight
	if maxInFlight <= 0 {
		maxInFlight = cfg.Pipeline.MaxInFlightEvents
	}
	em.slots = make(chan struct{}, maxInFlight)
	if rep.Selection.Topic != "" {
		if err := checkTopic(ctx, cfg, rep.Selection.Topic); err != nil {
			return rep, err
		}
	}
	if rep.ExactlyOnce {
		txs, id, err := openTxn(ctx, cfg, log)
		if err != nil {
			return rep, fmt.Errorf("exactly-once: %w; nothing was produced", err)
		}
		defer txs.Close()
		types, err := replication.ColumnTypes(ctx, tx, q.table)
		if err != nil {
			return rep, fmt.Errorf("exactly-once: read column types of %s: %w; nothing was produced", q.table, err)
		}
		// A bytea payload is produced as its bytes, as walpost run does.
		if err := kafkaconf.SetTableTypes(txs, cfg.Mapping, kafkaconf.Lookup(types)); err != nil {
			return rep, fmt.Errorf("exactly-once: %w; nothing was produced", err)
		}
		em.sink, em.txs = txs, txs
		em.per, em.interval = cfg.Delivery.TransactionRecords, cfg.Delivery.TransactionInterval
		em.cp = kafka.TxnMark{Slot: cfg.Postgres.Slot + "-resend", SystemID: id.SystemID, Timeline: id.Timeline}
		rep.TransactionalID = resendTxnID(cfg.Postgres.Slot, id.SystemID)
	}
	if em.sink == nil {
		return rep, errors.New("resend: no sink")
	}
	before, beforeBytes, prevCursor := st.Produced, st.Bytes, st.Cursor
	save := func(finished bool) error {
		cur, n, b := em.front.prefix()
		if cur == nil {
			cur = prevCursor
		}
		st.Cursor, st.Produced, st.Bytes, st.Finished = cur, before+n, beforeBytes+b, finished
		return saveState(opts.ProgressFile, st)
	}
	// Before the first record: a file that cannot be written fails here.
	if err := save(false); err != nil {
		return rep, fmt.Errorf("%w: give a writable --progress-file; nothing was produced", err)
	}
	log.Info("resend started", "table", rep.Table, "by", string(rep.By), "rows", rep.Matched,
		"snapshot_at", rep.SnapshotAt, "progress_file", opts.ProgressFile, "resumed", opts.Resume)

	start := time.Now()
	s := &streamer{r: r, em: em, pace: newPacer(opts.MaxRate), topic: rep.Selection.Topic, start: start, matched: rep.Matched, save: save, log: log}
	err := s.stream(ctx, tx, q)
	if err == nil {
		err = em.finish(ctx)
	}
	rep.Elapsed = time.Since(start)
	if err != nil {
		// Settle what is in flight so the recorded prefix is as long as it
		// can be (exactly-once: abort the open transaction).
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.Kafka.FlushTimeout)
		em.settle(fctx, log)
		cancel()
		_, rep.Produced, rep.Bytes = em.front.prefix()
		rep.Txns = em.txns
		serr := save(false)
		return rep, r.failed(ctx, err, serr, opts, rep)
	}
	s.tick(true)
	_, rep.Produced, rep.Bytes = em.front.prefix()
	rep.Txns = em.txns
	rep.Finished = true
	if err := save(true); err != nil {
		return rep, fmt.Errorf("every row is in Kafka, but %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return rep, fmt.Errorf("end the snapshot transaction: %w", err)
	}
	log.Info("resend finished", "rows", rep.Produced, "bytes", rep.Bytes, "elapsed", rep.Elapsed.Round(time.Millisecond), "kafka_transactions", rep.Txns)
	return rep, nil
}

// failed is the error of a resend that stopped: why, how far it got, and
// how to go on.
func (r *Resender) failed(ctx context.Context, err, saveErr error, opts Options, rep *Report) error {
	where := fmt.Sprintf("%d of %d rows of this run are in Kafka", rep.Produced, rep.Matched)
	next := fmt.Sprintf("continue with walpost resend --resume --progress-file %s", opts.ProgressFile)
	if saveErr != nil {
		next = fmt.Sprintf("the progress could not be recorded (%v): --progress-file %s names an earlier row, and --resume sends again from there", saveErr, opts.ProgressFile)
	}
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("interrupted: %s; %s", where, next)
	}
	return fmt.Errorf("%w; %s; fix the cause (a row walpost cannot build must be corrected in the outbox table) and %s", err, where, next)
}

// checkTopic refuses a --topic Kafka does not have.
func checkTopic(ctx context.Context, cfg *config.Config, topic string) error {
	cl, err := kafkaconf.NewClient(cfg.Kafka)
	if err != nil {
		return err
	}
	defer cl.Close()
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = kafka.DescribeTopic(dctx, cl, topic)
	if errors.Is(err, kafka.ErrTopicMissing) {
		return fmt.Errorf("%w: --topic %s does not exist: create it first (kafka-topics.sh --create --topic %s --partitions N); resend creates no topic", ErrRefused, topic, topic)
	}
	if err != nil {
		return fmt.Errorf("--topic: %w", err)
	}
	return nil
}

// streamer reads the rows of the query and hands them to the emitter in
// order, at most at the pacer's rate.
type streamer struct {
	r       *Resender
	em      *emitter
	pace    *pacer
	topic   string
	start   time.Time
	matched int64
	save    func(bool) error
	log     *slog.Logger

	lastSave, lastProgress time.Time
	at                     time.Time
}

func (s *streamer) stream(ctx context.Context, tx pgx.Tx, q query) error {
	sql, args := q.rowsSQL()
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return q.explain(err)
	}
	defer rows.Close()
	var prevXID int64 = -1
	seq := 0
	s.lastSave, s.lastProgress = s.start, s.start
	for rows.Next() {
		ev, cur, bytes, at, err := scanRow(rows, s.topic)
		if err != nil {
			return q.explain(err)
		}
		if int64(ev.XID) != prevXID {
			prevXID, seq = int64(ev.XID), 0
		}
		ev.Seq = seq
		seq++
		if at != nil {
			s.at = *at
		}
		// An open Kafka transaction is committed before a wait that
		// would keep it open past delivery.transaction_interval:
		// read_committed consumers of its partitions wait for it.
		if err := s.em.commitBefore(ctx, s.pace.pending()); err != nil {
			return err
		}
		if err := s.pace.wait(ctx); err != nil {
			return err
		}
		if err := s.em.emit(ctx, ev, cur, bytes); err != nil {
			return err
		}
		s.tick(false)
	}
	if err := rows.Err(); err != nil {
		return q.explain(err)
	}
	return nil
}

// tick rewrites the progress file every saveEvery and reports progress
// every ProgressEvery (and, with last, now).
func (s *streamer) tick(last bool) {
	now := time.Now()
	if now.Sub(s.lastSave) >= saveEvery {
		s.lastSave = now
		// A failed write leaves an earlier row in the file: --resume
		// would send more again, never fewer. The final write reports.
		if err := s.save(false); err != nil {
			s.log.Warn("record the resend's progress", "error", err)
		}
	}
	every := s.r.ProgressEvery
	if every <= 0 {
		every = 5 * time.Second
	}
	if s.r.OnProgress != nil && (last || now.Sub(s.lastProgress) >= every) {
		s.lastProgress = now
		_, n, b := s.em.front.prefix()
		s.r.OnProgress(Progress{Produced: n, Matched: s.matched, Bytes: b, Elapsed: now.Sub(s.start), At: s.at})
	}
}

// scanRow reads one row of rowsSQL into its event (marked Resent; its
// topic replaced by topic when set), its cursor, its bytes and its time.
//
// A row's commit LSN is not in the table: the event carries 0/0, which
// never moves a consumer's per-partition commit position (DESIGN.md,
// "The consumer half"); consumers tell resent records by walpost_resent.
func scanRow(rows pgx.Rows, topic string) (*outbox.Event, Cursor, int64, *time.Time, error) {
	var (
		ev                          outbox.Event
		payload, rtopic, pkey, etyp *string
		headers                     *string
		created, commit, at         *time.Time
		xid                         int64
		cur                         Cursor
	)
	if err := rows.Scan(&ev.ID, &ev.IdempotencyKey, &payload, &ev.CreatedAt, &created, &commit,
		&xid, &cur.CMin, &cur.CTID, &rtopic, &pkey, &etyp, &headers, &at, &cur.At); err != nil {
		return nil, cur, 0, nil, err
	}
	cur.XID = xid
	if payload != nil {
		ev.Payload = []byte(*payload)
	}
	if rtopic != nil {
		ev.Topic = *rtopic
	}
	if topic != "" {
		ev.Topic = topic
	}
	if pkey != nil {
		ev.PartitionKey, ev.HasPartition = *pkey, true
	}
	if etyp != nil {
		ev.EventType = *etyp
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
	ev.Resent = true
	bytes := int64(len(ev.IdempotencyKey) + len(ev.Payload) + len(ev.Headers))
	return &ev, cur, bytes, at, nil
}

// query is the selection as SQL over the snapshot.
type query struct {
	table    replication.TableName
	cols     []string
	commitTS bool
	sel      Selection
	where    *Where
	// bound, when set, is the upper bound of a resumed resend without
	// --until (at or before it); after is the row it continues after.
	bound time.Time
	after *Cursor
}

func (q query) by() By {
	if q.commitTS {
		return ByCommitTimestamp
	}
	return ByCreatedAt
}

// ts is the row's commit timestamp, NULL without them.
func (q query) ts() string {
	if q.commitTS {
		return "pg_xact_commit_timestamp(xmin)"
	}
	return "NULL::timestamptz"
}

// at is the row's time: its commit timestamp, else created_at.
func (q query) at() string {
	if q.commitTS {
		return "COALESCE(pg_xact_commit_timestamp(xmin), created_at)"
	}
	return "created_at"
}

// opt is column c with cast, or NULL when the table does not have it.
func (q query) opt(c, cast string) string {
	if slices.Contains(q.cols, c) {
		return pgx.Identifier{c}.Sanitize() + cast
	}
	return "NULL" + cast
}

// orderKey is Order's key: time, inserting transaction, command within
// it, physical place.
func (q query) orderKey() string {
	return q.at() + ", xmin::text::bigint, cmin::text::bigint, ctid"
}

// filter is the WHERE clause of the selection and its arguments.
func (q query) filter() (string, []any) {
	conds := []string{"true"}
	var args []any
	arg := func(v any, cast string) string {
		args = append(args, v)
		return fmt.Sprintf("$%d::%s", len(args), cast)
	}
	if !q.sel.Since.IsZero() {
		conds = append(conds, q.at()+" >= "+arg(q.sel.Since, "timestamptz"))
	}
	if !q.sel.Until.IsZero() {
		conds = append(conds, q.at()+" < "+arg(q.sel.Until, "timestamptz"))
	} else if !q.bound.IsZero() {
		conds = append(conds, q.at()+" <= "+arg(q.bound, "timestamptz"))
	}
	if len(q.sel.Keys) > 0 {
		conds = append(conds, "idempotency_key = ANY("+arg(q.sel.Keys, "text[]")+")")
	}
	if q.after != nil {
		a := q.after
		conds = append(conds, "("+q.orderKey()+") > ("+arg(a.At, "timestamptz")+", "+arg(a.XID, "bigint")+", "+
			arg(a.CMin, "bigint")+", "+arg(a.CTID, "tid")+")")
	}
	if q.where != nil {
		conds = append(conds, q.where.SQL())
	}
	return strings.Join(conds, "\n  AND "), args
}

// rowsSQL selects the rows in Order: id, key, payload, created_at (text,
// and as a time when finite), commit timestamp, xid, cmin, ctid, topic,
// partition key, event type, headers, the row's time (when finite) and
// its text.
func (q query) rowsSQL() (string, []any) {
	where, args := q.filter()
	at := q.at()
	return `SELECT id::text, idempotency_key, payload::text, created_at::text,
       CASE WHEN isfinite(created_at) THEN created_at END, ` + q.ts() + `,
       xmin::text::bigint, cmin::text::bigint, ctid::text, ` + q.opt("topic", "::text") + `, ` +
		q.opt("partition_key", "::text") + `, ` + q.opt("event_type", "::text") + `, ` + q.opt("headers", "::text") + `,
       CASE WHEN isfinite(` + at + `) THEN ` + at + ` END, (` + at + `)::text
FROM ` + q.table.String() + `
WHERE ` + where + `
ORDER BY ` + q.orderKey(), args
}

// countSQL counts the selection: rows, bytes (key, payload and headers
// text) and the finite bounds of their time.
func (q query) countSQL() (string, []any) {
	where, args := q.filter()
	at := q.at()
	return `SELECT count(*), COALESCE(sum(octet_length(idempotency_key) + COALESCE(octet_length(payload::text), 0) + COALESCE(octet_length(` +
		q.opt("headers", "::text") + `), 0)), 0)::bigint,
       min(` + at + `) FILTER (WHERE isfinite(` + at + `)), max(` + at + `) FILTER (WHERE isfinite(` + at + `))
FROM ` + q.table.String() + `
WHERE ` + where, args
}

// explain names --where in an error PostgreSQL raised while running the
// selection (a predicate that is not boolean, a type mismatch).
func (q query) explain(err error) error {
	if q.where != nil {
		return fmt.Errorf("read the rows of %s with --where %q: %w (check the predicate with --dry-run)", q.table, q.where.Text, err)
	}
	return fmt.Errorf("read the rows of %s: %w", q.table, err)
}
