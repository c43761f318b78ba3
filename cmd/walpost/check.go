package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink/kafka"
)

func newCheckCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "check",
		Short: "Pre-flight: verify PostgreSQL and Kafka are ready for walpost",
		Long: "check prints one line per check (OK, FAIL with the fix, or SKIP when an\n" +
			"earlier failure makes it moot) and exits 1 when any check fails.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfigFor(cmd, config.NeedAll)
			if err != nil {
				return err
			}
			if failed := runChecks(cmd.Context(), cfg, cmd.OutOrStdout()); failed > 0 {
				return &exitError{code: 1, err: fmt.Errorf("%d check(s) failed", failed)}
			}
			return nil
		},
	}
}

// checker prints check results and counts failures.
type checker struct {
	w      io.Writer
	failed int
}

func (c *checker) ok(name, detail string) { fmt.Fprintf(c.w, "OK    %-14s %s\n", name, detail) }
func (c *checker) fail(name string, err error) {
	c.failed++
	fmt.Fprintf(c.w, "FAIL  %-14s %s\n", name, redact.String(err.Error()))
}
func (c *checker) skip(name, why string) { fmt.Fprintf(c.w, "SKIP  %-14s %s\n", name, why) }

// runChecks runs every pre-flight check and returns the number that failed.
func runChecks(ctx context.Context, cfg *config.Config, w io.Writer) int {
	c := &checker{w: w}
	checkPostgres(ctx, cfg, c)
	checkKafka(ctx, cfg, c)
	return c.failed
}

func checkPostgres(ctx context.Context, cfg *config.Config, c *checker) {
	names := []string{"wal_level", "replication", "outbox", "publication", "slot", "capacity", "poison_table"}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, cfg.Postgres.URL)
	if err != nil {
		c.fail("postgres", fmt.Errorf("cannot connect (%w); fix: check host, port, user, password and database in postgres.url (WALPOST_POSTGRES_URL)",
			replication.Explain(err, cfg.Postgres.Slot, cfg.Postgres.Publication)))
		for _, n := range names {
			c.skip(n, "no PostgreSQL connection")
		}
		return
	}
	defer conn.Close(context.Background())
	var version, user, db string
	_ = conn.QueryRow(ctx, "SELECT current_setting('server_version'), current_user, current_database()").Scan(&version, &user, &db)
	pc := conn.Config()
	c.ok("postgres", fmt.Sprintf("connected to %s:%d/%s as %s (PostgreSQL %s)", pc.Host, pc.Port, db, user, version))

	var walLevel string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&walLevel); err != nil {
		c.fail("wal_level", err)
	} else if walLevel != "logical" {
		c.fail("wal_level", fmt.Errorf("wal_level is %q; fix: set wal_level = logical in postgresql.conf (ALTER SYSTEM SET wal_level = logical) and restart PostgreSQL", walLevel))
	} else {
		c.ok("wal_level", "logical")
	}

	var canReplicate bool
	if err := conn.QueryRow(ctx, "SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&canReplicate); err != nil {
		c.fail("replication", err)
	} else if !canReplicate {
		c.fail("replication", fmt.Errorf("role %q may not replicate; fix: ALTER ROLE %s REPLICATION", user, pgx.Identifier{user}.Sanitize()))
	} else {
		c.ok("replication", fmt.Sprintf("role %q has REPLICATION", user))
	}

	table, err := replication.ResolveTable(ctx, conn, cfg.Postgres.Table)
	tableOK := err == nil
	if err == nil {
		err = replication.CheckColumns(ctx, conn, table)
	}
	if err == nil {
		err = checkUniqueKey(ctx, conn, table)
	}
	if err != nil {
		c.fail("outbox", err)
	} else {
		c.ok("outbox", fmt.Sprintf("%s has the required columns and a UNIQUE idempotency_key", table))
	}

	if !tableOK {
		c.skip("publication", "outbox table missing")
	} else if err := checkPublicationOps(ctx, conn, cfg.Postgres.Publication, table); err != nil {
		c.fail("publication", err)
	} else {
		c.ok("publication", fmt.Sprintf("%q covers exactly %s, inserts only", cfg.Postgres.Publication, table))
	}

	slot, err := replication.ReadSlot(ctx, conn, cfg.Postgres.Slot)
	switch {
	case err != nil:
		c.fail("slot", err)
	case !slot.Exists:
		c.ok("slot", fmt.Sprintf("%q does not exist yet; walpost run creates it", cfg.Postgres.Slot))
	default:
		if err := replication.CheckSlot(ctx, conn, cfg.Postgres.Slot, slot); err != nil {
			c.fail("slot", err)
		} else {
			state := "inactive"
			if slot.Active {
				state = fmt.Sprintf("active (backend pid %d)", slot.ActivePID)
			}
			c.ok("slot", fmt.Sprintf("%q logical/pgoutput in %s, wal_status %s, confirmed %s, %s", cfg.Postgres.Slot, slot.Database, slot.WALStatus, slot.ConfirmedFlush, state))
		}
	}

	var maxSlots, usedSlots, maxSenders, usedSenders int
	err = conn.QueryRow(ctx, `SELECT current_setting('max_replication_slots')::int, (SELECT count(*) FROM pg_replication_slots),
		current_setting('max_wal_senders')::int, (SELECT count(*) FROM pg_stat_replication)`).Scan(&maxSlots, &usedSlots, &maxSenders, &usedSenders)
	switch {
	case err != nil:
		c.fail("capacity", err)
	case !slot.Exists && usedSlots >= maxSlots:
		c.fail("capacity", fmt.Errorf("all %d replication slots are in use; fix: raise max_replication_slots or drop an unused slot", maxSlots))
	case usedSenders >= maxSenders:
		c.fail("capacity", fmt.Errorf("all %d WAL senders are in use; fix: raise max_wal_senders", maxSenders))
	default:
		c.ok("capacity", fmt.Sprintf("slots %d/%d used, wal senders %d/%d used", usedSlots, maxSlots, usedSenders, maxSenders))
	}

	var poisonExists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", cfg.Postgres.PoisonTable).Scan(&poisonExists); err != nil {
		c.fail("poison_table", err)
	} else if !poisonExists {
		c.fail("poison_table", fmt.Errorf("table %q does not exist; fix: run walpost migrate", cfg.Postgres.PoisonTable))
	} else {
		c.ok("poison_table", fmt.Sprintf("%q exists", cfg.Postgres.PoisonTable))
	}
}

func checkUniqueKey(ctx context.Context, conn *pgx.Conn, table replication.TableName) error {
	var unique, notNull bool
	err := conn.QueryRow(ctx, `
		SELECT EXISTS (
		         SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
		         WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indnkeyatts = 1 AND i.indpred IS NULL
		           AND a.attname = 'idempotency_key'),
		       (SELECT attnotnull FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'idempotency_key')`,
		table.String()).Scan(&unique, &notNull)
	if err != nil {
		return fmt.Errorf("read indexes of %s: %w", table, err)
	}
	if !unique {
		return fmt.Errorf("%s has no UNIQUE constraint on idempotency_key alone; fix: ALTER TABLE %s ADD UNIQUE (idempotency_key)", table, table)
	}
	if !notNull {
		return fmt.Errorf("%s.idempotency_key is nullable; fix: ALTER TABLE %s ALTER COLUMN idempotency_key SET NOT NULL", table, table)
	}
	return nil
}

func checkPublicationOps(ctx context.Context, conn *pgx.Conn, pub string, table replication.TableName) error {
	if err := replication.CheckPublication(ctx, conn, pub, table); err != nil {
		return err
	}
	var upd, del, trunc bool
	if err := conn.QueryRow(ctx, "SELECT pubupdate, pubdelete, pubtruncate FROM pg_publication WHERE pubname = $1", pub).Scan(&upd, &del, &trunc); err != nil {
		return err
	}
	if upd || del || trunc {
		var ops []string
		for _, op := range []struct {
			name string
			on   bool
		}{{"update", upd}, {"delete", del}, {"truncate", trunc}} {
			if op.on {
				ops = append(ops, op.name)
			}
		}
		return fmt.Errorf("publication %q also publishes %s; fix: ALTER PUBLICATION %s SET (publish = 'insert')", pub, strings.Join(ops, ", "), pub)
	}
	return nil
}

func checkKafka(ctx context.Context, cfg *config.Config, c *checker) {
	cl, err := kafka.NewClient(cfg.Kafka, kgo.DialTimeout(5*time.Second))
	if err != nil {
		c.fail("kafka", err)
		c.skip("topic", "no Kafka client")
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
		c.fail("kafka", fmt.Errorf("brokers %v unreachable (%v); fix: check kafka.brokers (WALPOST_KAFKA_BROKERS) and that the brokers listen there", cfg.Kafka.Brokers, err))
		c.skip("topic", "Kafka unreachable")
		return
	}
	c.ok("kafka", fmt.Sprintf("%d broker(s) reachable via %v", len(brokers), cfg.Kafka.Brokers))
	info, err := kafka.DescribeTopic(cctx, cl, cfg.Kafka.Topic)
	if err != nil {
		if errors.Is(err, kafka.ErrTopicMissing) && cfg.Kafka.CreateTopicPartitions > 0 {
			c.ok("topic", fmt.Sprintf("%q does not exist yet; walpost run creates it with %d partition(s) (kafka.create_topic_partitions)", cfg.Kafka.Topic, cfg.Kafka.CreateTopicPartitions))
			return
		}
		c.fail("topic", err)
		return
	}
	c.ok("topic", fmt.Sprintf("%q has %d partition(s), max.message.bytes %d", info.Name, info.Partitions, info.MaxMessageBytes))
}
