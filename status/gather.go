package status

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/kafkaconf"
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/poison"
	"github.com/walpost/walpost/replication"
)

// timeout bounds the PostgreSQL part and, separately, the Kafka part.
const timeout = 10 * time.Second

// Gather reads everything the report shows, PostgreSQL and Kafka side by
// side, each within 10 s. It fails only when PostgreSQL cannot be reached
// (or postgres.url does not parse, or the first query fails); every other
// problem ends up in the report, as a section's error or a note.
func Gather(ctx context.Context, cfg *config.Config) (*Report, error) {
	r := &Report{Notes: []string{}}
	// Kafka runs alongside PostgreSQL: an unreachable broker costs its
	// timeout once, not on top of the database queries.
	var wg sync.WaitGroup
	kctx, kcancel := context.WithCancel(ctx)
	defer kcancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.Kafka = gatherKafka(kctx, cfg, timeout)
	}()
	err := gatherPostgres(ctx, cfg, r)
	if err != nil {
		kcancel()
	}
	wg.Wait()
	if err != nil {
		return nil, err
	}
	return r, nil
}

func gatherPostgres(ctx context.Context, cfg *config.Config, r *Report) error {
	pcfg, err := replication.PoolConfig(cfg.Postgres.URL)
	if err != nil {
		return redact.Error(fmt.Errorf("postgres.url: %w", err))
	}
	pcfg.MaxConns = 2
	cctx, cancel := context.WithTimeout(ctx, timeout)
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

	srv, err := replication.ReadServer(cctx, conn)
	if err != nil {
		return redact.Error(fmt.Errorf("query PostgreSQL: %w", err))
	}
	r.Postgres = Postgres{Database: srv.Database, Version: srv.Version, InRecovery: srv.InRecovery, CurrentWALLSN: srv.CurrentWALLSN}

	gatherSlot(ctx, cctx, conn, cfg, r)

	// Outbox table, then the publication (checked against it).
	r.Outbox.Table = cfg.Postgres.Table
	table, err := replication.ResolveTable(cctx, conn, cfg.Postgres.Table)
	tableOK := err == nil
	if err != nil {
		r.Outbox.Error = errStr(err)
	} else {
		r.Outbox.Table = table.Schema + "." + table.Name
		readOutbox(cctx, conn, table, &r.Outbox)
	}

	r.Publication = readPublication(cctx, conn, cfg.Postgres.Publication)
	if r.Publication.Exists && r.Publication.Error == nil && tableOK {
		if err := replication.CheckPublication(cctx, conn, cfg.Postgres.Publication, table); err != nil {
			r.note("publication: %s", err)
		}
	}

	gatherPoison(cctx, conn, pool, cfg, r)
	return nil
}

// note adds a note to r, redacted.
func (r *Report) note(format string, args ...any) {
	r.Notes = append(r.Notes, redact.String(fmt.Sprintf(format, args...)))
}

// errStr is err's message, redacted, for a section's Error.
func errStr(err error) *string { s := redact.String(err.Error()); return &s }

// gatherSlot fills the slot section, with its copies on the standbys, and notes what is wrong with it.
func gatherSlot(ctx, cctx context.Context, conn *pgx.Conn, cfg *config.Config, r *Report) {
	var info replication.SlotInfo
	r.Slot, info = readSlot(cctx, conn, cfg.Postgres.Slot)
	r.Slot.Standbys = []StandbySlot{}
	if info.Exists {
		// Their own budget: unreachable hosts must not starve the reads
		// below of cctx's.
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		standbys, _ := replication.ReadStandbySlots(sctx, cfg.Postgres.URL, cfg.Postgres.Slot)
		scancel()
		for _, s := range standbys {
			st := StandbySlot{Standby: s.Standby, State: s.State}
			if s.Confirmed != "" {
				st.Confirmed = &s.Confirmed
			}
			if s.Err != "" {
				msg := redact.String(s.Err)
				st.Error = &msg
			}
			r.Slot.Standbys = append(r.Slot.Standbys, st)
			if !s.Protected() && s.State != "unsupported" {
				r.note("failover not yet protected: %s", s.Detail())
			}
		}
	}
	if r.Slot.Exists {
		if err := replication.CheckSlot(cctx, conn, cfg.Postgres.Slot, info); err != nil {
			r.note("slot: %s", err)
		} else if !info.Active {
			r.note("slot: %q is inactive: no walpost is streaming from it, and PostgreSQL keeps its WAL until one does", cfg.Postgres.Slot)
		}
		if info.WALStatus == "unreserved" {
			r.note("slot: wal_status is unreserved: the slot's WAL exceeds max_slot_wal_keep_size and may be removed at the next checkpoint; the slot is then lost")
		}
	}
}

// gatherPoison fills the poison table section and notes quarantined events.
func gatherPoison(cctx context.Context, conn *pgx.Conn, pool *pgxpool.Pool, cfg *config.Config, r *Report) {
	r.Poison.Table = cfg.Postgres.PoisonTable
	if exists, err := replication.TableExists(cctx, conn, cfg.Postgres.PoisonTable); err != nil {
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
				r.note("poison: %d event(s) quarantined and not replayed: see walpost poison list, then walpost poison replay", pending)
			}
		}
	}
}

// readSlot reads the slot section and, when the slot exists, the slot as
// the replication checks take it.
func readSlot(ctx context.Context, q replication.Querier, name string) (Slot, replication.SlotInfo) {
	s := Slot{Name: name}
	row, ok, err := replication.QuerySlot(ctx, q, name)
	if err != nil {
		msg := redact.String(fmt.Sprintf("read slot %q: %s", name, err))
		s.Error = &msg
		return s, replication.SlotInfo{}
	}
	if !ok {
		msg := fmt.Sprintf("slot %q does not exist: walpost run creates it", name)
		s.Error = &msg
		return s, replication.SlotInfo{}
	}
	s.Exists = true
	s.SlotType, s.Plugin, s.Database = &row.SlotType, row.Plugin, row.Database
	s.Active, s.ActivePID = &row.Active, row.ActivePID
	s.ConfirmedFlushLSN, s.RestartLSN = row.ConfirmedFlushLSN, row.RestartLSN
	s.LagBytes, s.RetainedWALBytes = row.LagBytes, row.RetainedWALBytes
	s.WALStatus, s.SafeWALSizeBytes, s.SafeWALUnlimited = row.WALStatus, row.SafeWALSize, row.SafeWALUnlimited
	s.Failover, s.Synced = row.Failover, row.Synced
	return s, row.Info()
}

func readOutbox(ctx context.Context, q replication.Querier, table replication.TableName, o *Outbox) {
	st, err := replication.ReadRowStats(ctx, q, table)
	if err != nil {
		msg := redact.String(fmt.Sprintf("estimate rows of %s: %s", table, err))
		o.Error = &msg
		return
	}
	// n_live_tup follows inserts and deletes as they commit; reltuples only
	// moves with VACUUM/ANALYZE (and is -1 before the first).
	var n int64
	var src string
	switch {
	case st.LiveTuples != nil:
		n, src = *st.LiveTuples, "pg_stat_user_tables.n_live_tup"
	case st.RelTuples >= 0:
		n, src = int64(st.RelTuples), "pg_class.reltuples"
	default:
		msg := "no statistics yet (never analyzed)"
		o.Error = &msg
		return
	}
	o.RowEstimate, o.RowEstimateSource = &n, &src
}

func readPublication(ctx context.Context, q replication.Querier, name string) Publication {
	p := Publication{Name: name, Tables: []string{}, Operations: []string{}}
	pub, ok, err := replication.ReadPublication(ctx, q, name)
	if err != nil {
		msg := redact.String(fmt.Sprintf("read publication %q: %s", name, err))
		p.Error = &msg
		return p
	}
	if !ok {
		msg := fmt.Sprintf("publication %q does not exist: run walpost migrate, or set postgres.publication", name)
		p.Error = &msg
		return p
	}
	p.Exists, p.AllTables = true, &pub.AllTables
	p.Operations = append(p.Operations, pub.Operations()...)
	tables, err := replication.PublicationTables(ctx, q, name)
	if err != nil {
		msg := redact.String(fmt.Sprintf("read tables of publication %q: %s", name, err))
		p.Error = &msg
		return p
	}
	for _, t := range tables {
		p.Tables = append(p.Tables, t.Schema+"."+t.Name)
	}
	return p
}

// gatherKafka reads the default topic's partitions and end offsets within
// timeout; a failure is the section's error, never the command's.
func gatherKafka(ctx context.Context, cfg *config.Config, timeout time.Duration) Kafka {
	k := Kafka{Brokers: append([]string{}, cfg.Kafka.Brokers...), Topic: cfg.Kafka.Topic}
	fail := func(format string, args ...any) Kafka {
		msg := fmt.Sprintf(format, args...)
		k.Error = &msg
		return k
	}
	if len(cfg.Kafka.Brokers) == 0 {
		return fail("kafka.brokers (WALPOST_KAFKA_BROKERS) is not set")
	}
	cl, err := kafkaconf.NewClient(cfg.Kafka, kgo.DialTimeout(timeout/2), kgo.RetryTimeout(timeout))
	if err != nil {
		return fail("%s", err)
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	unreachable := func(err error) Kafka {
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
	k.EndOffsets = []Partition{}
	var sum int64
	complete := true
	for _, p := range td.Partitions.Numbers() {
		sp := Partition{Partition: p}
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
