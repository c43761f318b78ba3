package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/poison"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink/kafka"
)

func init() { extraCommands = append(extraCommands, newStatusCommand) }

func newStatusCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the slot, publication, outbox, poison table and topic at a glance",
		Long: "status prints the replication slot (active, pid, confirmed and restart LSN, lag, retained\n" +
			"WAL, wal_status, safe WAL size), the publication, an estimate of the outbox row count, the\n" +
			"poison table's pending and replayed counts, and the topic's partitions and end offsets.\n" +
			"Parts that cannot be read (no slot yet, Kafka unreachable) are reported as such and the\n" +
			"command still exits 0; it exits 1 only when PostgreSQL is unreachable or the config is invalid.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfigFor(cmd, config.NeedPostgres)
			if err != nil {
				return err
			}
			r, err := gatherStatus(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if asJSON {
				return renderStatusJSON(cmd.OutOrStdout(), r)
			}
			return renderStatusText(cmd.OutOrStdout(), r)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// statusReport is what `walpost status` shows; its JSON form is the output
// of --json. A field that could not be read is null, and the section's
// error says why.
type statusReport struct {
	Postgres    statusPostgres    `json:"postgres"`
	Slot        statusSlot        `json:"slot"`
	Publication statusPublication `json:"publication"`
	Outbox      statusOutbox      `json:"outbox"`
	Poison      statusPoison      `json:"poison"`
	Kafka       statusKafka       `json:"kafka"`
	// Notes are problems worth acting on (inactive slot, quarantined
	// events, a publication that does not fit the outbox…).
	Notes []string `json:"notes"`
}

type statusPostgres struct {
	Database   string `json:"database"`
	Version    string `json:"version"`
	InRecovery bool   `json:"in_recovery"`
	// CurrentWALLSN is pg_current_wal_lsn() (on a standby, the last
	// replayed LSN); lag and retained WAL are measured from it.
	CurrentWALLSN *string `json:"current_wal_lsn"`
}

type statusSlot struct {
	Name              string  `json:"name"`
	Exists            bool    `json:"exists"`
	SlotType          *string `json:"slot_type"`
	Plugin            *string `json:"plugin"`
	Database          *string `json:"database"`
	Active            *bool   `json:"active"`
	ActivePID         *int32  `json:"active_pid"`
	ConfirmedFlushLSN *string `json:"confirmed_flush_lsn"`
	RestartLSN        *string `json:"restart_lsn"`
	// LagBytes is current WAL − confirmed_flush_lsn: WAL not yet confirmed.
	LagBytes *int64 `json:"lag_bytes"`
	// RetainedWALBytes is current WAL − restart_lsn: WAL the slot keeps.
	RetainedWALBytes *int64  `json:"retained_wal_bytes"`
	WALStatus        *string `json:"wal_status"`
	// SafeWALSizeBytes is null when max_slot_wal_keep_size is -1
	// (unlimited; SafeWALUnlimited is then true) or the slot is lost.
	SafeWALSizeBytes *int64  `json:"safe_wal_size_bytes"`
	SafeWALUnlimited bool    `json:"safe_wal_unlimited"`
	Error            *string `json:"error"`
}

type statusPublication struct {
	Name       string   `json:"name"`
	Exists     bool     `json:"exists"`
	AllTables  *bool    `json:"all_tables"`
	Tables     []string `json:"tables"`
	Operations []string `json:"operations"`
	Error      *string  `json:"error"`
}

type statusOutbox struct {
	Table string `json:"table"`
	// RowEstimate is an estimate from the statistics, not a count.
	RowEstimate       *int64  `json:"row_estimate"`
	RowEstimateSource *string `json:"row_estimate_source"`
	Error             *string `json:"error"`
}

type statusPoison struct {
	Table    string  `json:"table"`
	Pending  *int64  `json:"pending"`
	Replayed *int64  `json:"replayed"`
	Error    *string `json:"error"`
}

type statusKafka struct {
	Brokers    []string          `json:"brokers"`
	Topic      string            `json:"topic"`
	Partitions *int              `json:"partitions"`
	EndOffsets []statusPartition `json:"end_offsets"`
	// EndOffsetSum is the sum of the partitions' end offsets: every record
	// ever written to the topic, by walpost or anyone else.
	EndOffsetSum *int64  `json:"end_offset_sum"`
	Error        *string `json:"error"`
}

type statusPartition struct {
	Partition int32   `json:"partition"`
	EndOffset *int64  `json:"end_offset"`
	Error     *string `json:"error"`
}

const statusTimeout = 10 * time.Second

// gatherStatus reads everything status shows. It fails only when
// PostgreSQL cannot be reached; every other problem ends up in the report.
func gatherStatus(ctx context.Context, cfg *config.Config) (*statusReport, error) {
	r := &statusReport{Notes: []string{}}
	// Kafka runs alongside PostgreSQL: an unreachable broker costs its
	// timeout once, not on top of the database queries.
	var wg sync.WaitGroup
	kctx, kcancel := context.WithCancel(ctx)
	defer kcancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.Kafka = gatherKafkaStatus(kctx, cfg, statusTimeout)
	}()
	err := gatherPostgresStatus(ctx, cfg, r)
	if err != nil {
		kcancel()
	}
	wg.Wait()
	if err != nil {
		return nil, err
	}
	return r, nil
}

func gatherPostgresStatus(ctx context.Context, cfg *config.Config, r *statusReport) error {
	pcfg, err := pgxpool.ParseConfig(cfg.Postgres.URL)
	if err != nil {
		return redact.Error(fmt.Errorf("postgres.url: %w", err))
	}
	pcfg.MaxConns = 2
	cctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(cctx, pcfg)
	if err != nil {
		return redact.Error(fmt.Errorf("postgres.url: %w", err))
	}
	defer pool.Close()
	pc, err := pool.Acquire(cctx)
	if err != nil {
		return fmt.Errorf("cannot connect to PostgreSQL (%s); fix: check host, port, user, password and database in postgres.url (WALPOST_POSTGRES_URL)",
			redact.String(replication.Explain(err, cfg.Postgres.Slot, cfg.Postgres.Publication).Error()))
	}
	defer pc.Release()
	conn := pc.Conn()

	var current *string
	err = conn.QueryRow(cctx, `
		SELECT current_database(), current_setting('server_version'), pg_is_in_recovery(),
		       (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)::text`).
		Scan(&r.Postgres.Database, &r.Postgres.Version, &r.Postgres.InRecovery, &current)
	if err != nil {
		return redact.Error(fmt.Errorf("query PostgreSQL: %w", err))
	}
	r.Postgres.CurrentWALLSN = current

	note := func(format string, args ...any) {
		r.Notes = append(r.Notes, redact.String(fmt.Sprintf(format, args...)))
	}
	errStr := func(err error) *string { s := redact.String(err.Error()); return &s }

	// Slot.
	r.Slot = readStatusSlot(cctx, conn, cfg.Postgres.Slot)
	if r.Slot.Exists {
		info := replication.SlotInfo{Exists: true, SlotType: statusDeref(r.Slot.SlotType), WALStatus: statusDeref(r.Slot.WALStatus),
			Plugin: statusDeref(r.Slot.Plugin), Database: statusDeref(r.Slot.Database)}
		if err := replication.CheckSlot(cctx, conn, cfg.Postgres.Slot, info); err != nil {
			note("slot: %s", err)
		} else if r.Slot.Active != nil && !*r.Slot.Active {
			note("slot: %q is inactive: no walpost is streaming from it, and PostgreSQL keeps its WAL until one does", cfg.Postgres.Slot)
		}
		if statusDeref(r.Slot.WALStatus) == "unreserved" {
			note("slot: wal_status is unreserved: the slot's WAL exceeds max_slot_wal_keep_size and may be removed at the next checkpoint; the slot is then lost")
		}
	}

	// Outbox table, then the publication (checked against it).
	r.Outbox.Table = cfg.Postgres.Table
	table, err := replication.ResolveTable(cctx, conn, cfg.Postgres.Table)
	tableOK := err == nil
	if err != nil {
		r.Outbox.Error = errStr(err)
	} else {
		r.Outbox.Table = table.Schema + "." + table.Name
		readStatusOutbox(cctx, conn, table, &r.Outbox)
	}

	r.Publication = readStatusPublication(cctx, conn, cfg.Postgres.Publication)
	if r.Publication.Exists && r.Publication.Error == nil && tableOK {
		if err := replication.CheckPublication(cctx, conn, cfg.Postgres.Publication, table); err != nil {
			note("publication: %s", err)
		}
	}

	// Poison table.
	r.Poison.Table = cfg.Postgres.PoisonTable
	var exists bool
	if err := conn.QueryRow(cctx, "SELECT to_regclass($1) IS NOT NULL", cfg.Postgres.PoisonTable).Scan(&exists); err != nil {
		r.Poison.Error = errStr(err)
	} else if !exists {
		r.Poison.Error = errStr(fmt.Errorf("table %q does not exist: run walpost migrate", cfg.Postgres.PoisonTable))
	} else {
		pending, replayed, err := poison.NewStore(pool, cfg.Postgres.PoisonTable).Counts(cctx)
		if err != nil {
			r.Poison.Error = errStr(err)
		} else {
			r.Poison.Pending, r.Poison.Replayed = &pending, &replayed
			if pending > 0 {
				note("poison: %d event(s) quarantined and not replayed: see walpost poison list, then walpost poison replay", pending)
			}
		}
	}
	return nil
}

func readStatusSlot(ctx context.Context, conn *pgx.Conn, name string) statusSlot {
	s := statusSlot{Name: name}
	err := conn.QueryRow(ctx, `
		WITH cur AS (SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END AS lsn)
		SELECT s.slot_type, s.plugin, s.database, s.active, s.active_pid,
		       s.confirmed_flush_lsn::text, s.restart_lsn::text,
		       pg_wal_lsn_diff(cur.lsn, s.confirmed_flush_lsn)::bigint,
		       pg_wal_lsn_diff(cur.lsn, s.restart_lsn)::bigint,
		       s.wal_status, s.safe_wal_size, current_setting('max_slot_wal_keep_size') = '-1'
		FROM pg_replication_slots s, cur WHERE s.slot_name = $1`, name).
		Scan(&s.SlotType, &s.Plugin, &s.Database, &s.Active, &s.ActivePID, &s.ConfirmedFlushLSN, &s.RestartLSN,
			&s.LagBytes, &s.RetainedWALBytes, &s.WALStatus, &s.SafeWALSizeBytes, &s.SafeWALUnlimited)
	if errors.Is(err, pgx.ErrNoRows) {
		msg := fmt.Sprintf("slot %q does not exist: walpost run creates it", name)
		s.Error = &msg
		return s
	}
	if err != nil {
		msg := redact.String(fmt.Sprintf("read slot %q: %s", name, err))
		s.Error = &msg
		return s
	}
	s.Exists = true
	return s
}

func readStatusOutbox(ctx context.Context, conn *pgx.Conn, table replication.TableName, o *statusOutbox) {
	// n_live_tup follows inserts and deletes as they commit; reltuples only
	// moves with VACUUM/ANALYZE (and is -1 before the first).
	var reltuples float64
	var liveTup *int64
	err := conn.QueryRow(ctx, `
		SELECT c.reltuples::float8, s.n_live_tup
		FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
		WHERE c.oid = to_regclass($1)`, table.String()).Scan(&reltuples, &liveTup)
	if err != nil {
		msg := redact.String(fmt.Sprintf("estimate rows of %s: %s", table, err))
		o.Error = &msg
		return
	}
	var n int64
	var src string
	switch {
	case liveTup != nil:
		n, src = *liveTup, "pg_stat_user_tables.n_live_tup"
	case reltuples >= 0:
		n, src = int64(reltuples), "pg_class.reltuples"
	default:
		msg := "no statistics yet (never analyzed)"
		o.Error = &msg
		return
	}
	o.RowEstimate, o.RowEstimateSource = &n, &src
}

func readStatusPublication(ctx context.Context, conn *pgx.Conn, name string) statusPublication {
	p := statusPublication{Name: name, Tables: []string{}, Operations: []string{}}
	var all, ins, upd, del, trunc bool
	err := conn.QueryRow(ctx, `SELECT puballtables, pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_publication WHERE pubname = $1`, name).
		Scan(&all, &ins, &upd, &del, &trunc)
	if errors.Is(err, pgx.ErrNoRows) {
		msg := fmt.Sprintf("publication %q does not exist: run walpost migrate, or set postgres.publication", name)
		p.Error = &msg
		return p
	}
	if err != nil {
		msg := redact.String(fmt.Sprintf("read publication %q: %s", name, err))
		p.Error = &msg
		return p
	}
	p.Exists, p.AllTables = true, &all
	for _, op := range []struct {
		name string
		on   bool
	}{{"insert", ins}, {"update", upd}, {"delete", del}, {"truncate", trunc}} {
		if op.on {
			p.Operations = append(p.Operations, op.name)
		}
	}
	rows, err := conn.Query(ctx, `SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = $1 ORDER BY 1`, name)
	if err == nil {
		var tables []string
		tables, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err == nil {
			p.Tables = append(p.Tables, tables...)
		}
	}
	if err != nil {
		msg := redact.String(fmt.Sprintf("read tables of publication %q: %s", name, err))
		p.Error = &msg
	}
	return p
}

// gatherKafkaStatus reads the default topic's partitions and end offsets
// within timeout; a failure is the section's error, never the command's.
func gatherKafkaStatus(ctx context.Context, cfg *config.Config, timeout time.Duration) statusKafka {
	k := statusKafka{Brokers: append([]string{}, cfg.Kafka.Brokers...), Topic: cfg.Kafka.Topic}
	fail := func(format string, args ...any) statusKafka {
		msg := fmt.Sprintf(format, args...)
		k.Error = &msg
		return k
	}
	if len(cfg.Kafka.Brokers) == 0 {
		return fail("kafka.brokers (WALPOST_KAFKA_BROKERS) is not set")
	}
	cl, err := kafka.NewClient(cfg.Kafka, kgo.DialTimeout(timeout/2), kgo.RetryTimeout(timeout))
	if err != nil {
		return fail("%s", err)
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	unreachable := func(err error) statusKafka {
		if errors.Is(err, context.DeadlineExceeded) {
			return fail("brokers %s unreachable: no broker answered within %s", strings.Join(cfg.Kafka.Brokers, ","), timeout)
		}
		return fail("brokers %s unreachable: %s", strings.Join(cfg.Kafka.Brokers, ","), err)
	}
	adm := kadm.NewClient(cl)
	tds, err := adm.ListTopics(cctx, cfg.Kafka.Topic)
	if err != nil {
		return unreachable(err)
	}
	td, ok := tds[cfg.Kafka.Topic]
	if !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		return fail("topic %q does not exist (walpost run creates it when kafka.create_topic_partitions > 0)", cfg.Kafka.Topic)
	}
	if td.Err != nil {
		return fail("describe topic %q: %s", cfg.Kafka.Topic, td.Err)
	}
	n := len(td.Partitions)
	k.Partitions = &n
	offs, err := adm.ListEndOffsets(cctx, cfg.Kafka.Topic)
	if err != nil {
		return unreachable(err)
	}
	k.EndOffsets = []statusPartition{}
	var sum int64
	complete := true
	for _, p := range td.Partitions.Numbers() {
		sp := statusPartition{Partition: p}
		o, ok := offs.Lookup(cfg.Kafka.Topic, p)
		switch {
		case !ok:
			msg := "no end offset returned"
			sp.Error = &msg
		case o.Err != nil:
			msg := o.Err.Error()
			sp.Error = &msg
		default:
			off := o.Offset
			sp.EndOffset = &off
			sum += off
		}
		if sp.Error != nil {
			complete = false
		}
		k.EndOffsets = append(k.EndOffsets, sp)
	}
	if complete {
		k.EndOffsetSum = &sum
	} else {
		return fail("some partitions of %q returned no end offset", cfg.Kafka.Topic)
	}
	return k
}

func statusDeref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// renderStatusJSON writes r as indented JSON.
func renderStatusJSON(w io.Writer, r *statusReport) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// renderStatusText writes r for people: one section per part, "-" for
// what could not be read, and the notes last.
func renderStatusText(w io.Writer, r *statusReport) error {
	var b strings.Builder
	line := func(label, value string) { fmt.Fprintf(&b, "  %-14s %s\n", label+":", value) }
	orDash := func(s *string) string {
		if s == nil || *s == "" {
			return "-"
		}
		return *s
	}
	errLine := func(e *string) {
		if e != nil {
			line("error", *e)
		}
	}

	fmt.Fprintf(&b, "postgres %s\n", r.Postgres.Database)
	line("version", r.Postgres.Version)
	cur := orDash(r.Postgres.CurrentWALLSN)
	if r.Postgres.InRecovery {
		cur += " (standby: last replayed)"
	}
	line("current WAL", cur)

	s := r.Slot
	fmt.Fprintf(&b, "slot %s\n", s.Name)
	if !s.Exists {
		line("exists", "no")
	} else {
		active := "no"
		if s.Active != nil && *s.Active {
			active = "yes"
			if s.ActivePID != nil {
				active += fmt.Sprintf(" (pid %d)", *s.ActivePID)
			}
		}
		line("active", active)
		line("plugin", orDash(s.Plugin))
		line("confirmed LSN", orDash(s.ConfirmedFlushLSN))
		line("restart LSN", orDash(s.RestartLSN))
		line("lag", statusBytes(s.LagBytes))
		line("retained WAL", statusBytes(s.RetainedWALBytes))
		line("wal_status", orDash(s.WALStatus))
		safe := statusBytes(s.SafeWALSizeBytes)
		if s.SafeWALSizeBytes == nil && s.SafeWALUnlimited && statusDeref(s.WALStatus) != "lost" {
			safe = "unlimited (max_slot_wal_keep_size = -1)"
		}
		line("safe WAL size", safe)
	}
	errLine(s.Error)

	p := r.Publication
	fmt.Fprintf(&b, "publication %s\n", p.Name)
	if p.Exists {
		tables := strings.Join(p.Tables, ", ")
		if p.AllTables != nil && *p.AllTables {
			tables = "ALL TABLES"
		} else if tables == "" {
			tables = "(none)"
		}
		line("tables", tables)
		ops := strings.Join(p.Operations, ", ")
		if ops == "" {
			ops = "(none)"
		}
		line("operations", ops)
	} else {
		line("exists", "no")
	}
	errLine(p.Error)

	o := r.Outbox
	fmt.Fprintf(&b, "outbox %s\n", o.Table)
	est := "-"
	if o.RowEstimate != nil {
		est = fmt.Sprintf("~%d (estimate from %s)", *o.RowEstimate, orDash(o.RowEstimateSource))
	}
	line("rows", est)
	errLine(o.Error)

	pz := r.Poison
	fmt.Fprintf(&b, "poison %s\n", pz.Table)
	line("pending", statusInt(pz.Pending))
	line("replayed", statusInt(pz.Replayed))
	errLine(pz.Error)

	k := r.Kafka
	fmt.Fprintf(&b, "kafka topic %s\n", k.Topic)
	line("brokers", strings.Join(k.Brokers, ","))
	parts := "-"
	if k.Partitions != nil {
		parts = strconv.Itoa(*k.Partitions)
	}
	line("partitions", parts)
	if len(k.EndOffsets) > 0 {
		var offs []string
		for _, po := range k.EndOffsets {
			offs = append(offs, fmt.Sprintf("%d=%s", po.Partition, statusInt(po.EndOffset)))
		}
		sum := ""
		if k.EndOffsetSum != nil {
			sum = fmt.Sprintf(" (sum %d)", *k.EndOffsetSum)
		}
		line("end offsets", strings.Join(offs, " ")+sum)
	} else {
		line("end offsets", "-")
	}
	errLine(k.Error)

	if len(r.Notes) > 0 {
		fmt.Fprintln(&b, "notes")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "  - %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func statusInt(n *int64) string {
	if n == nil {
		return "-"
	}
	return strconv.FormatInt(*n, 10)
}

// statusBytes shows a byte count exactly, with a binary-unit rendering
// beside it from 1 KiB up.
func statusBytes(n *int64) string {
	if n == nil {
		return "-"
	}
	v := *n
	abs := v
	if abs < 0 {
		abs = -abs
	}
	if abs < 1024 {
		return fmt.Sprintf("%d B", v)
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB"}
	f := float64(v) / 1024
	u := 0
	for (f >= 1024 || f <= -1024) && u < len(units)-1 {
		f /= 1024
		u++
	}
	return fmt.Sprintf("%d B (%.1f %s)", v, f, units[u])
}
