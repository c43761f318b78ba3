package preflight

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/kafkaconf"
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/poison"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink/kafka"
)

// Status is the outcome of one check.
type Status string

// The outcomes of a check.
const (
	OK   Status = "OK"   // the check passed
	Fail Status = "FAIL" // the check failed; walpost run would fail or lose its guarantees
	Skip Status = "SKIP" // an earlier failure makes the check moot
	// Warn: the check passed, but a setting puts a guarantee at risk; it
	// does not count as failed.
	Warn Status = "WARN"
)

// Check is the result of one check.
type Check struct {
	// Name is the check's name (doc.go lists them, in order).
	Name   string
	Status Status
	// Detail is what was found (OK), the problem and its fix (FAIL), or
	// why the check did not run (SKIP). PostgreSQL passwords are redacted.
	Detail string
	// Err is the failure, for errors.Is and errors.As (its message is
	// redacted too); nil unless Status is Fail.
	Err error
}

// WriteText writes the check's line: the status padded to 6 columns, the
// name padded to 14, the detail.
func (c Check) WriteText(w io.Writer) error {
	_, err := fmt.Fprintf(w, "%-6s%-14s %s\n", c.Status, c.Name, c.Detail)
	return err
}

// Result is every check, in the order they ran.
type Result struct {
	Checks []Check
}

// Failed is the number of checks that failed.
func (r Result) Failed() int {
	n := 0
	for _, c := range r.Checks {
		if c.Status == Fail {
			n++
		}
	}
	return n
}

// WriteText writes one line per check (Check.WriteText), in order.
func (r Result) WriteText(w io.Writer) error {
	for _, c := range r.Checks {
		if err := c.WriteText(w); err != nil {
			return err
		}
	}
	return nil
}

// Run runs every check, PostgreSQL's, Kafka's, then the schema registry's
// (when a registry format is set), and returns their
// results. When w is not nil each check's line is written to it as soon as
// the check is done, so a slow broker does not hold back PostgreSQL's
// results.
func Run(ctx context.Context, cfg *config.Config, w io.Writer) Result {
	r := &runner{w: w}
	checkPostgres(ctx, cfg, r)
	checkKafka(ctx, cfg, r)
	checkSchemaRegistry(cfg, r)
	return Result{Checks: r.checks}
}

// runner collects the checks' results and writes each as it comes.
type runner struct {
	w      io.Writer
	checks []Check
}

func (r *runner) add(c Check) {
	r.checks = append(r.checks, c)
	if r.w != nil {
		_ = c.WriteText(r.w)
	}
}

func (r *runner) ok(name, detail string)   { r.add(Check{Name: name, Status: OK, Detail: detail}) }
func (r *runner) skip(name, why string)    { r.add(Check{Name: name, Status: Skip, Detail: why}) }
func (r *runner) warn(name, detail string) { r.add(Check{Name: name, Status: Warn, Detail: detail}) }
func (r *runner) fail(name string, err error) {
	err = redact.Error(err)
	r.add(Check{Name: name, Status: Fail, Detail: err.Error(), Err: err})
}

// checkPostgres runs PostgreSQL's checks, in order: the connection and
// the server's version, then on that connection the server's settings
// (checkServer), the outbox table and publication (checkOutbox), the slot
// and walpost's position on it (checkSlotAndPosition), the capacity and
// the poison table. Without a connection, or on a server too old, the
// rest are skipped.
func checkPostgres(ctx context.Context, cfg *config.Config, r *runner) {
	names := []string{"wal_level", "replication", "sessions", "outbox", "publication", "slot", "position", "capacity", "poison_table"}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, cfg.Postgres.URL)
	if err != nil {
		r.fail("postgres", fmt.Errorf("cannot connect (%w); fix: check host, port, user, password and database in postgres.url (WALPOST_POSTGRES_URL)",
			replication.Explain(err, cfg.Postgres.Slot, cfg.Postgres.Publication)))
		for _, n := range names {
			r.skip(n, "no PostgreSQL connection")
		}
		return
	}
	defer conn.Close(context.Background())
	srv, srvErr := replication.ReadServer(ctx, conn)
	pc := conn.Config()
	if err := replication.CheckVersion(srv.Version, srv.VersionNum); srvErr == nil && err != nil {
		r.fail("postgres", fmt.Errorf("connected to %s:%d/%s as %s: %w", pc.Host, pc.Port, srv.Database, srv.User, err))
		for _, n := range names {
			r.skip(n, fmt.Sprintf("PostgreSQL %s is not supported", srv.Version))
		}
		return
	}
	r.ok("postgres", fmt.Sprintf("connected to %s:%d/%s as %s (PostgreSQL %s)", pc.Host, pc.Port, srv.Database, srv.User, srv.Version))

	checkServer(ctx, conn, srv, r)
	binary := checkOutbox(ctx, conn, cfg, r)
	slot := checkSlotAndPosition(ctx, conn, cfg, srv, r)
	checkCapacity(ctx, conn, slot, r)

	// What walpost run checks at the start of every session: a poison
	// table it cannot write would stop it at the first quarantine.
	if err := poison.CheckTable(ctx, conn, cfg.Postgres.PoisonTable); err != nil {
		r.fail("poison_table", err)
	} else if err := checkBinaryPoison(ctx, conn, cfg.Postgres.PoisonTable, binary); err != nil {
		r.fail("poison_table", err)
	} else {
		r.ok("poison_table", fmt.Sprintf("%q has the columns walpost writes, keyed by (outbox_id, commit_lsn)", cfg.Postgres.PoisonTable))
	}
}

// checkServer checks the server's settings and the role: wal_level,
// replication and sessions.
func checkServer(ctx context.Context, conn *pgx.Conn, srv replication.Server, r *runner) {
	// The fixes name the managed service's own setting or role when the
	// server looks like one (a failed read: the self-managed fixes).
	managed, _ := replication.ReadManaged(ctx, conn)
	plat := detectPlatform(managed)
	if walLevel, err := replication.WALLevel(ctx, conn); err != nil {
		r.fail("wal_level", err)
	} else if walLevel != "logical" {
		r.fail("wal_level", fmt.Errorf("wal_level is %q; fix: %s", walLevel, walLevelFix(plat)))
	} else {
		r.ok("wal_level", "logical")
	}

	if canReplicate, err := replication.CanReplicate(ctx, conn); err != nil {
		r.fail("replication", err)
	} else if plat == rds && managed.InRDSReplication && !canReplicate {
		r.ok("replication", fmt.Sprintf("role %q is a member of rds_replication", srv.User))
	} else if !canReplicate {
		r.fail("replication", fmt.Errorf("role %q may not replicate; fix: %s", srv.User, replicationFix(plat, srv.User)))
	} else {
		r.ok("replication", fmt.Sprintf("role %q has REPLICATION", srv.User))
	}

	// What the role and the database set that would end or cancel a
	// session; walpost sets each to 0 on its own connections (this one,
	// opened plainly, shows what others get).
	if found, err := replication.ReadSessionSettings(ctx, conn); err != nil {
		r.fail("sessions", err)
	} else {
		r.ok("sessions", sessionsDetail(found, srv.User, srv.Database))
	}
}

// checkOutbox checks the outbox table (its columns under the mapping, the
// unique idempotency key, the column types the record formats need) and
// the publication; binary reports a bytea payload column.
func checkOutbox(ctx context.Context, conn *pgx.Conn, cfg *config.Config, r *runner) (binary bool) {
	table, err := replication.ResolveTable(ctx, conn, cfg.Postgres.Table)
	tableOK := err == nil
	if err == nil {
		err = replication.CheckColumns(ctx, conn, table, kafkaconf.Columns(cfg.Mapping))
	}
	idCol := cfg.Mapping.KeyColumn // walpost: the key is the idempotency key
	if cfg.Mapping.Profile == config.ProfileDebezium {
		idCol = cfg.Mapping.IDColumn // consumers deduplicate on the id header
	}
	if err == nil {
		err = checkUniqueKey(ctx, conn, table, idCol)
	}
	var encodings string
	if err == nil {
		encodings, binary, err = checkFormats(ctx, conn, table, cfg.Mapping)
	}
	if err != nil {
		r.fail("outbox", err)
	} else {
		r.ok("outbox", fmt.Sprintf("%s has the columns of mapping.profile %s and a UNIQUE %s; %s", table, cfg.Mapping.Profile, idCol, encodings))
	}

	if !tableOK {
		r.skip("publication", "outbox table missing")
	} else if err := checkPublicationOps(ctx, conn, cfg.Postgres.Publication, table); err != nil {
		r.fail("publication", err)
	} else {
		r.ok("publication", fmt.Sprintf("%q covers exactly %s, inserts only", cfg.Postgres.Publication, table))
	}
	return binary
}

// checkSlotAndPosition checks the slot (checkSlot) and walpost's
// recorded position on it (checkPosition), and returns the slot as read.
func checkSlotAndPosition(ctx context.Context, conn *pgx.Conn, cfg *config.Config, srv replication.Server, r *runner) replication.SlotInfo {
	row, found, rowErr := position.NewStore(conn).Load(ctx, cfg.Postgres.Slot)
	slot, err := replication.ReadSlot(ctx, conn, cfg.Postgres.Slot)
	switch {
	case err != nil:
		r.fail("slot", err)
	case !slot.Exists && found:
		r.skip("slot", fmt.Sprintf("%q does not exist, but walpost recorded a position on it: see position", cfg.Postgres.Slot))
	case !slot.Exists:
		detail := fmt.Sprintf("%q does not exist yet; walpost run creates it", cfg.Postgres.Slot)
		failover := srv.VersionNum >= replication.FailoverSlotsVersionNum && !srv.InRecovery
		if failover {
			detail += " as a failover slot"
		}
		if w := joinWarnings(failoverWarning(ctx, conn, srv, failover), idleTimeoutWarning(ctx, conn, cfg.Postgres.OutageBudget)); w != "" {
			r.warn("slot", detail+"; "+w)
		} else {
			r.ok("slot", detail)
		}
	default:
		checkSlot(ctx, conn, cfg, srv, slot, r)
	}

	switch {
	case err != nil:
		r.skip("position", "slot unreadable")
	case rowErr != nil:
		r.fail("position", rowErr)
	default:
		checkPosition(ctx, cfg, row, found, slot, r)
	}
	return slot
}

// checkSlot checks a slot that exists: replication.CheckSlot, its state,
// whether it is a failover slot and its copies on the standbys.
func checkSlot(ctx context.Context, conn *pgx.Conn, cfg *config.Config, srv replication.Server, slot replication.SlotInfo, r *runner) {
	if err := replication.CheckSlot(ctx, conn, cfg.Postgres.Slot, slot); err != nil {
		r.fail("slot", err)
		return
	}
	state := "inactive"
	if slot.Active {
		state = fmt.Sprintf("active (backend pid %d)", slot.ActivePID)
	}
	detail := fmt.Sprintf("%q logical/pgoutput in %s, wal_status %s, confirmed %s, %s", cfg.Postgres.Slot, slot.Database, slot.WALStatus, slot.ConfirmedFlush, state)
	if srv.VersionNum >= replication.FailoverSlotsVersionNum {
		if slot.Failover {
			detail += ", failover slot"
		} else {
			detail += ", not a failover slot (created without failover: a promoted standby will not have it)"
		}
	}
	synced, unsynced := standbysDetail(ctx, cfg)
	detail += synced
	if w := joinWarnings(failoverWarning(ctx, conn, srv, slot.Failover), idleTimeoutWarning(ctx, conn, cfg.Postgres.OutageBudget), unsynced); w != "" {
		r.warn("slot", detail+"; "+w)
	} else {
		r.ok("slot", detail)
	}
}

// checkCapacity checks that a replication slot (when walpost still has
// to create its own) and a WAL sender are free.
func checkCapacity(ctx context.Context, conn *pgx.Conn, slot replication.SlotInfo, r *runner) {
	c, err := replication.ReadCapacity(ctx, conn)
	switch {
	case err != nil:
		r.fail("capacity", err)
	case !slot.Exists && c.UsedSlots >= c.MaxSlots:
		r.fail("capacity", fmt.Errorf("all %d replication slots are in use; fix: raise max_replication_slots or drop an unused slot", c.MaxSlots))
	case c.UsedWALSenders >= c.MaxWALSenders:
		r.fail("capacity", fmt.Errorf("all %d WAL senders are in use; fix: raise max_wal_senders", c.MaxWALSenders))
	default:
		r.ok("capacity", fmt.Sprintf("slots %d/%d used, wal senders %d/%d used", c.UsedSlots, c.MaxSlots, c.UsedWALSenders, c.MaxWALSenders))
	}
}

// checkPosition is the start-up check of walpost run (position.Check):
// the stored position against the server's identity (IDENTIFY_SYSTEM on a
// replication connection) and the slot.
func checkPosition(ctx context.Context, cfg *config.Config, row position.Row, found bool, slot replication.SlotInfo, r *runner) {
	if !found {
		r.ok("position", fmt.Sprintf("none recorded for slot %q yet; walpost run records it when it starts", cfg.Postgres.Slot))
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := replication.ConnectReplication(cctx, cfg.Postgres.URL)
	if err != nil {
		r.fail("position", fmt.Errorf("replication connection: %w", replication.Explain(err, cfg.Postgres.Slot, cfg.Postgres.Publication)))
		return
	}
	defer conn.Close(context.Background())
	id, err := position.Identify(cctx, conn)
	if err != nil {
		r.fail("position", err)
		return
	}
	plan, err := position.Check(row, found, id, position.Slot{
		Name: cfg.Postgres.Slot, Exists: slot.Exists, Lost: slot.Invalidated(), LostWhy: slot.InvalidatedWhy(), Confirmed: slot.ConfirmedFlush,
	})
	switch {
	case err != nil:
		r.fail("position", err)
	case plan.TimelineChanged:
		r.ok("position", fmt.Sprintf("%s on timeline %d, server on timeline %d: walpost run skips at most up to the switch point of timeline %d (TIMELINE_HISTORY) and sends again what follows it and the slot's %s", row.Last(), row.Timeline, id.Timeline, row.Timeline, slot.ConfirmedFlush))
	case plan.SkipTo > 0:
		r.ok("position", fmt.Sprintf("%s; the slot is behind at %s: walpost run skips what was confirmed up to %s", row.Last(), slot.ConfirmedFlush, plan.SkipTo))
	default:
		r.ok("position", fmt.Sprintf("%s, %s", row.Last(), id))
	}
}

// checkUniqueKey: the idempotency key is what consumers deduplicate on, so
// it must be unique and present in every row.
func checkUniqueKey(ctx context.Context, conn *pgx.Conn, table replication.TableName, col string) error {
	unique, notNull, err := replication.UniqueColumn(ctx, conn, table, col)
	if err != nil {
		return fmt.Errorf("read indexes of %s: %w", table, err)
	}
	if !unique {
		return fmt.Errorf("%s has no UNIQUE constraint on %s alone; fix: ALTER TABLE %s ADD UNIQUE (%s)", table, col, table, col)
	}
	if !notNull {
		return fmt.Errorf("%s.%s is nullable; fix: ALTER TABLE %s ALTER COLUMN %s SET NOT NULL", table, col, table, col)
	}
	return nil
}

// checkFormats checks the key and payload column types as walpost run
// does at each session start (kafkaconf.MappingTypes: a column it cannot
// encode is an error naming it) and says how the record carries each;
// binary reports a bytea payload.
func checkFormats(ctx context.Context, conn *pgx.Conn, table replication.TableName, m config.Mapping) (encodings string, binary bool, err error) {
	types, err := replication.ColumnTypes(ctx, conn, table)
	if err != nil {
		return "", false, fmt.Errorf("read column types of %s: %w", table, err)
	}
	kt, vt, err := kafkaconf.MappingTypes(m, kafkaconf.Lookup(types))
	if err != nil {
		return "", false, err
	}
	return fmt.Sprintf("record key %s: %s, value %s: %s",
		m.KeyColumn, kafka.Encoding(types[m.KeyColumn].Type, m.KeyFormat, kt),
		m.PayloadColumn, kafka.Encoding(types[m.PayloadColumn].Type, m.ValueFormat, vt)), vt.Binary, nil
}

// checkBinaryPoison is poison.CheckBinaryPayloadTable when the payload
// is bytea (binary), as walpost run checks it at each session start.
func checkBinaryPoison(ctx context.Context, conn *pgx.Conn, table string, binary bool) error {
	if !binary {
		return nil
	}
	return poison.CheckBinaryPayloadTable(ctx, conn, table)
}

// checkPublicationOps is replication.CheckPublication (what walpost run
// refuses to start without) and, beyond it, that the publication sends
// inserts only: walpost forwards inserts and logs a warning for the rest,
// which the walsender still decodes and sends.
func checkPublicationOps(ctx context.Context, conn *pgx.Conn, pub string, table replication.TableName) error {
	if err := replication.CheckPublication(ctx, conn, pub, table); err != nil {
		return err
	}
	p, ok, err := replication.ReadPublication(ctx, conn, pub)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("publication %q does not exist", pub)
	}
	var ops []string
	for _, op := range p.Operations() {
		if op != "insert" {
			ops = append(ops, op)
		}
	}
	if len(ops) > 0 {
		return fmt.Errorf("publication %q also publishes %s; fix: ALTER PUBLICATION %s SET (publish = 'insert')", pub, strings.Join(ops, ", "), pub)
	}
	return nil
}

func checkKafka(ctx context.Context, cfg *config.Config, r *runner) {
	cl, err := kafkaconf.NewClient(cfg.Kafka, kgo.DialTimeout(5*time.Second))
	if err != nil {
		r.fail("kafka", err)
		r.skip("topic", "no Kafka client")
		return
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	brokers, err := kadm.NewClient(cl).ListBrokers(cctx)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = errors.New("no broker answered within 10s")
		}
		r.fail("kafka", fmt.Errorf("brokers %v unreachable (%v); fix: check kafka.brokers (WALPOST_KAFKA_BROKERS) and that the brokers listen there", cfg.Kafka.Brokers, err))
		r.skip("topic", "Kafka unreachable")
		return
	}
	r.ok("kafka", fmt.Sprintf("%d broker(s) reachable via %v", len(brokers), cfg.Kafka.Brokers))
	checkTopic(cctx, cl, cfg.Kafka, r)
	if cfg.Delivery.Mode == config.ExactlyOnce {
		checkCheckpointTopic(cctx, cl, cfg.Kafka, r)
	}
}

// checkSchemaRegistry checks the registry of schema_registry.value_format
// and key_format (no line when both are none): the default topic's
// subjects must hold a usable schema under the topic strategy.
func checkSchemaRegistry(cfg *config.Config, r *runner) {
	var details []string
	for _, from := range []func(config.Schema) (*kafka.Schema, error){kafkaconf.SchemaFrom, kafkaconf.KeySchemaFrom} {
		s, err := from(cfg.Schema)
		if err != nil {
			r.fail("schema_registry", err)
			return
		}
		if s == nil {
			continue
		}
		d, err := s.Check(cfg.Kafka.Topic)
		if err != nil {
			r.fail("schema_registry", fmt.Errorf("%s: %w", cfg.Schema.URL, err))
			return
		}
		details = append(details, d)
	}
	if len(details) > 0 {
		r.ok("schema_registry", strings.Join(details, "; "))
	}
}

// checkCheckpointTopic checks kafka.checkpoint_topic in exactly-once mode:
// one partition, cleanup.policy=compact (DESIGN.md, "Exactly-once
// delivery"); check never creates it.
func checkCheckpointTopic(ctx context.Context, cl *kgo.Client, cfg config.Kafka, r *runner) {
	_, err := kafka.EnsureCheckpointTopic(ctx, cl, cfg.CheckpointTopic, false)
	switch {
	case errors.Is(err, kafka.ErrTopicMissing) && cfg.CreateTopicPartitions > 0:
		r.ok("checkpoint_topic", fmt.Sprintf("%q does not exist yet; walpost run creates it with 1 partition and cleanup.policy=compact (kafka.create_topic_partitions)", cfg.CheckpointTopic))
	case err != nil:
		r.fail("checkpoint_topic", err)
	default:
		detail := fmt.Sprintf("%q has 1 partition and cleanup.policy=compact", cfg.CheckpointTopic)
		if w := segmentWarning(ctx, cl, cfg.CheckpointTopic); w != "" {
			r.warn("checkpoint_topic", detail+"; "+w)
			return
		}
		r.ok("checkpoint_topic", detail)
	}
}

// maxCheckpointSegment is the largest checkpoint-topic segment.bytes check
// accepts without a warning.
const maxCheckpointSegment = 64 << 20

// segmentWarning warns when the checkpoint topic's segments are large:
// compaction never cleans the active segment, and every start of walpost
// reads the whole partition, so with Kafka's default (1 GiB) the starts
// read up to a gigabyte of checkpoints (each walpost sharing the topic
// writes two records per delivery.transaction_interval). An unreadable setting is no warning (the topic's other
// checks passed).
func segmentWarning(ctx context.Context, cl *kgo.Client, topic string) string {
	rcs, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return ""
	}
	rc, err := rcs.On(topic, nil)
	if err != nil || rc.Err != nil {
		return ""
	}
	for _, c := range rc.Configs {
		if c.Key != "segment.bytes" || c.Value == nil {
			continue
		}
		n, err := strconv.ParseInt(*c.Value, 10, 64)
		if err != nil || n <= maxCheckpointSegment {
			return ""
		}
		return fmt.Sprintf("its segment.bytes is %d: compaction never cleans the active segment and every start reads the whole partition, so starts slow down as it fills; fix: kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config segment.bytes=%d",
			n, topic, kafka.CheckpointSegmentBytes)
	}
	return ""
}

// checkTopic is the only user of the sink package's topic helpers here.
func checkTopic(ctx context.Context, cl *kgo.Client, cfg config.Kafka, r *runner) {
	info, err := kafka.DescribeTopic(ctx, cl, cfg.Topic)
	if err != nil {
		if errors.Is(err, kafka.ErrTopicMissing) && cfg.CreateTopicPartitions > 0 {
			r.ok("topic", fmt.Sprintf("%q does not exist yet; walpost run creates it with %d partition(s) (kafka.create_topic_partitions)", cfg.Topic, cfg.CreateTopicPartitions))
			return
		}
		r.fail("topic", err)
		return
	}
	r.ok("topic", fmt.Sprintf("%q has %d partition(s), max.message.bytes %d", info.Name, info.Partitions, info.MaxMessageBytes))
}

// failoverWarning is what puts a failover slot at risk on a primary with
// streaming standbys: an empty synchronized_standby_slots lets walpost
// publish a transaction that a standby promoted next has not received (a
// phantom event). Empty when there is nothing to warn about.
func failoverWarning(ctx context.Context, conn *pgx.Conn, srv replication.Server, failover bool) string {
	if !failover || srv.InRecovery {
		return ""
	}
	f, err := replication.ReadFailoverSetup(ctx, conn)
	if err != nil {
		return fmt.Sprintf("cannot read the standbys and synchronized_standby_slots: %v", err)
	}
	if f.PhysicalStandbys == 0 || f.SynchronizedStandbySlots == nil || *f.SynchronizedStandbySlots != "" {
		return ""
	}
	return fmt.Sprintf("synchronized_standby_slots is empty while %d physical standby(s) stream from this primary: walpost may publish a transaction a promoted standby never received; fix: ALTER SYSTEM SET synchronized_standby_slots = '<the standbys' physical slots>'; SELECT pg_reload_conf()", f.PhysicalStandbys)
}

// idleTimeoutWarning warns when PostgreSQL 18's
// idle_replication_slot_timeout would invalidate walpost's slot after an
// outage shorter than budget (postgres.outage_budget). Empty when there is
// nothing to warn about (0, or a server without the setting).
func idleTimeoutWarning(ctx context.Context, conn *pgx.Conn, budget time.Duration) string {
	var setting, unit *string
	err := conn.QueryRow(ctx, `SELECT setting, unit FROM pg_settings WHERE name = 'idle_replication_slot_timeout'`).Scan(&setting, &unit)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	if err != nil {
		return fmt.Sprintf("cannot read idle_replication_slot_timeout: %v", err)
	}
	timeout, ok := settingDuration(setting, unit)
	if !ok || timeout == 0 || timeout >= budget {
		return ""
	}
	return fmt.Sprintf("idle_replication_slot_timeout is %s, shorter than postgres.outage_budget (%s): a walpost stopped for longer loses its slot at the next checkpoint and walpost recover must close the gap; fix: ALTER SYSTEM SET idle_replication_slot_timeout = '0' (or longer than the outage budget); SELECT pg_reload_conf()",
		timeout, budget)
}

// settingDuration is a pg_settings integer time setting as a duration.
func settingDuration(setting, unit *string) (time.Duration, bool) {
	if setting == nil {
		return 0, false
	}
	n, err := strconv.ParseInt(*setting, 10, 64)
	if err != nil {
		return 0, false
	}
	u := ""
	if unit != nil {
		u = *unit
	}
	switch u {
	case "ms":
		return time.Duration(n) * time.Millisecond, true
	case "s":
		return time.Duration(n) * time.Second, true
	case "min":
		return time.Duration(n) * time.Minute, true
	case "h":
		return time.Duration(n) * time.Hour, true
	}
	return 0, false
}

// standbysDetail reads the slot's copies on the standbys postgres.url
// lists (PostgreSQL 17+): what is protected goes into the detail, what is
// not into a warning ("failover not yet protected").
func standbysDetail(ctx context.Context, cfg *config.Config) (synced, unsynced string) {
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	standbys, err := replication.ReadStandbySlots(sctx, cfg.Postgres.URL, cfg.Postgres.Slot)
	if err != nil {
		return "", ""
	}
	var ok, not []string
	for _, s := range standbys {
		if s.Protected() || s.State == "unsupported" {
			ok = append(ok, s.Detail())
		} else {
			not = append(not, s.Detail())
		}
	}
	if len(ok) > 0 {
		synced = "; " + strings.Join(ok, "; ")
	}
	if len(not) > 0 {
		unsynced = "failover not yet protected: " + strings.Join(not, "; ") + " (a promotion now loses the slot and needs walpost recover; the standby's slot sync worker copies it within about 30 s, and keeps the copy temporary until the primary's slot has moved past what the standby had)"
	}
	return synced, unsynced
}

// joinWarnings joins the non-empty warnings with "; ".
func joinWarnings(ws ...string) string {
	var out []string
	for _, w := range ws {
		if w != "" {
			out = append(out, w)
		}
	}
	return strings.Join(out, "; ")
}

// sessionsDetail says which of replication.SessionSettings the role or
// database sets, and that walpost overrides them.
func sessionsDetail(found map[string]string, user, db string) string {
	var set, known []string
	for _, name := range replication.SessionSettingNames() {
		v, ok := found[name]
		if !ok {
			continue // the server has no such setting (before 17: transaction_timeout)
		}
		known = append(known, name)
		if v != "" && v != "0" {
			set = append(set, name+"="+v)
		}
	}
	if len(set) == 0 {
		return fmt.Sprintf("role %q on database %q: %s are 0", user, db, strings.Join(known, ", "))
	}
	return fmt.Sprintf("role %q on database %q: %s; walpost sets each to 0 on its own connections, so none ends or cancels them", user, db, strings.Join(set, ", "))
}
