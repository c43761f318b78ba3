package integration

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walpost/walpost/migrations"
)

// checkLine is one result line of `walpost check`: OK, WARN, FAIL or SKIP, the
// check's name and its detail.
type checkLine struct {
	Status, Name, Detail string
}

// checkRun is a finished `walpost check`.
type checkRun struct {
	Lines  []checkLine
	Output string
	Code   int
}

func (r checkRun) byStatus(status string) map[string]string {
	out := map[string]string{}
	for _, l := range r.Lines {
		if l.Status == status {
			out[l.Name] = l.Detail
		}
	}
	return out
}

// runCheck runs `walpost check` with env (later entries win: exec.Cmd uses
// the last value of a duplicated key) and parses its result lines.
func runCheck(t *testing.T, env []string) checkRun {
	t.Helper()
	out, err := walpostOutput(t, env, "check")
	r := checkRun{Output: out}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
	default:
		t.Fatalf("walpost check did not run: %v\n%s", err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		status, rest, _ := strings.Cut(line, " ")
		if status != "OK" && status != "FAIL" && status != "SKIP" && status != "WARN" {
			continue
		}
		name, detail, _ := strings.Cut(strings.TrimSpace(rest), " ")
		r.Lines = append(r.Lines, checkLine{Status: status, Name: name, Detail: strings.TrimSpace(detail)})
	}
	return r
}

// allChecks are the checks `walpost check` reports, in order.
var allChecks = []string{"postgres", "wal_level", "replication", "sessions", "outbox", "publication", "slot", "position", "capacity", "poison_table", "kafka", "topic"}

// expectFailures asserts that check exited 1 and that exactly the checks in
// want failed, each FAIL line containing every given substring (the fix).
func expectFailures(t *testing.T, r checkRun, want map[string][]string) {
	t.Helper()
	if r.Code != 1 {
		t.Errorf("walpost check exit code %d, want 1", r.Code)
	}
	fails := r.byStatus("FAIL")
	for name, subs := range want {
		detail, ok := fails[name]
		if !ok {
			t.Errorf("no FAIL line for %s", name)
			continue
		}
		for _, s := range subs {
			if !strings.Contains(detail, s) {
				t.Errorf("FAIL %s line does not contain %q:\n  %s", name, s, detail)
			}
		}
	}
	for name, detail := range fails {
		if _, ok := want[name]; !ok {
			t.Errorf("unexpected FAIL %s: %s", name, detail)
		}
	}
	if len(r.Lines) != len(allChecks) {
		t.Errorf("check printed %d result lines, want one per check (%v)", len(r.Lines), allChecks)
	}
	if t.Failed() {
		t.Logf("walpost check output:\n%s", r.Output)
	}
}

// TestCheck runs `walpost check` against the fixture's own setup (which
// passes every check) and against one broken setting at a time: each must
// produce exactly its FAIL line, naming the fix, and exit 1.
func TestCheck(t *testing.T) {
	f := newFixture(t, fixtureOpts{partitions: 1})
	ctx := context.Background()

	t.Run("fixture passes", func(t *testing.T) {
		t.Parallel()
		r := runCheck(t, f.env())
		if r.Code != 0 {
			t.Errorf("exit code %d, want 0", r.Code)
		}
		ok := r.byStatus("OK")
		for _, name := range allChecks {
			if _, found := ok[name]; !found {
				t.Errorf("no OK line for %s", name)
			}
		}
		if fails := r.byStatus("FAIL"); len(fails) > 0 {
			t.Errorf("FAIL lines on a correct setup: %v", fails)
		}
		if !strings.Contains(ok["topic"], f.Topic) || !strings.Contains(ok["publication"], f.Publication) {
			t.Errorf("OK lines do not name the fixture's topic/publication: %v", ok)
		}
		if t.Failed() {
			t.Logf("walpost check output:\n%s", r.Output)
		}
	})

	t.Run("missing topic created by run", func(t *testing.T) {
		t.Parallel()
		missing := randName("topic_missing")
		r := runCheck(t, f.env("WALPOST_KAFKA_TOPIC="+missing, "WALPOST_KAFKA_CREATE_TOPIC_PARTITIONS=3"))
		if r.Code != 0 || len(r.byStatus("FAIL")) > 0 {
			t.Errorf("exit code %d with kafka.create_topic_partitions=3, want 0 and no FAIL:\n%s", r.Code, r.Output)
		}
		if d := r.byStatus("OK")["topic"]; !strings.Contains(d, "creates it") {
			t.Errorf("topic OK line does not say walpost run creates it: %q", d)
		}
	})

	t.Run("missing outbox table", func(t *testing.T) {
		t.Parallel()
		missing := randName("outbox_missing")
		r := runCheck(t, f.env("WALPOST_POSTGRES_TABLE="+missing))
		expectFailures(t, r, map[string][]string{"outbox": {missing, "does not exist", "walpost migrate", "postgres.table"}})
		if _, skipped := r.byStatus("SKIP")["publication"]; !skipped {
			t.Errorf("publication not skipped although the table is missing:\n%s", r.Output)
		}
	})

	t.Run("missing publication", func(t *testing.T) {
		t.Parallel()
		missing := randName("pub_missing")
		r := runCheck(t, f.env("WALPOST_POSTGRES_PUBLICATION="+missing))
		expectFailures(t, r, map[string][]string{"publication": {
			missing, "does not exist",
			fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE "public".%q WITH (publish = 'insert')`, missing, f.Table),
		}})
	})

	t.Run("publication covers another table", func(t *testing.T) {
		t.Parallel()
		other, pub := randName("other"), randName("pub_wide")
		mustExec(t, f.Pool, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY)`, other))
		t.Cleanup(func() { _, _ = f.Pool.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %s`, other)) })
		mustExec(t, f.Pool, fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s, %s WITH (publish = 'insert')`, pub, f.Table, other))
		t.Cleanup(func() { _, _ = f.Pool.Exec(ctx, fmt.Sprintf(`DROP PUBLICATION IF EXISTS %s`, pub)) })
		r := runCheck(t, f.env("WALPOST_POSTGRES_PUBLICATION="+pub))
		expectFailures(t, r, map[string][]string{"publication": {
			pub, fmt.Sprintf(`also covers "public".%q`, other), "must cover only the outbox",
			fmt.Sprintf(`ALTER PUBLICATION %s DROP TABLE "public".%q`, pub, other),
		}})
	})

	t.Run("publication publishes more than inserts", func(t *testing.T) {
		t.Parallel()
		pub := randName("pub_all_ops")
		mustExec(t, f.Pool, fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s`, pub, f.Table)) // default: every operation
		t.Cleanup(func() { _, _ = f.Pool.Exec(ctx, fmt.Sprintf(`DROP PUBLICATION IF EXISTS %s`, pub)) })
		r := runCheck(t, f.env("WALPOST_POSTGRES_PUBLICATION="+pub))
		expectFailures(t, r, map[string][]string{"publication": {
			"also publishes update, delete, truncate",
			fmt.Sprintf("ALTER PUBLICATION %s SET (publish = 'insert')", pub),
		}})
	})

	t.Run("role without REPLICATION", func(t *testing.T) {
		t.Parallel()
		role, password := randName("norepl"), randName("pw")
		mustExec(t, f.Pool, fmt.Sprintf(`CREATE ROLE %s LOGIN NOREPLICATION NOSUPERUSER PASSWORD '%s'`, role, password))
		t.Cleanup(func() {
			// DROP OWNED revokes the grants in this database first.
			_, _ = f.Pool.Exec(ctx, fmt.Sprintf(`DROP OWNED BY %s`, role))
			if _, err := f.Pool.Exec(ctx, fmt.Sprintf(`DROP ROLE %s`, role)); err != nil {
				t.Errorf("drop role %s: %v", role, err)
			}
		})
		mustExec(t, f.Pool, fmt.Sprintf(`GRANT SELECT ON %s, %s, walpost_position TO %s`, f.Table, f.PoisonTable, role))
		u, err := url.Parse(pgURL)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword(role, password)
		r := runCheck(t, f.env("WALPOST_POSTGRES_URL="+u.String()))
		expectFailures(t, r, map[string][]string{"replication": {
			role, "may not replicate", fmt.Sprintf(`ALTER ROLE "%s" REPLICATION`, role),
		}})
		if d := r.byStatus("OK")["postgres"]; !strings.Contains(d, "as "+role) {
			t.Errorf("check did not connect as %s (is the URL override in effect?): %q", role, d)
		}
		if strings.Contains(r.Output, password) {
			t.Errorf("check output shows the role's password:\n%s", r.Output)
		}
	})

	t.Run("kafka unreachable", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		r := runCheck(t, f.env("WALPOST_KAFKA_BROKERS=127.0.0.1:1"))
		expectFailures(t, r, map[string][]string{"kafka": {"127.0.0.1:1", "unreachable", "kafka.brokers", "WALPOST_KAFKA_BROKERS"}})
		if _, skipped := r.byStatus("SKIP")["topic"]; !skipped {
			t.Errorf("topic not skipped although Kafka is unreachable:\n%s", r.Output)
		}
		if d := time.Since(start); d > 90*time.Second {
			t.Errorf("check took %s against an unreachable broker", d)
		}
	})

	t.Run("topic missing", func(t *testing.T) {
		t.Parallel()
		missing := randName("topic_missing")
		r := runCheck(t, f.env("WALPOST_KAFKA_TOPIC="+missing))
		expectFailures(t, r, map[string][]string{"topic": {missing, "does not exist", "kafka.create_topic_partitions", "kafka-topics.sh --create"}})
	})
}

// TestCheckRDSReplicationRole: on a server with RDS's rds_replication role
// (created here, cluster-wide, so this test never runs in parallel), check
// accepts a member of it and tells a role without REPLICATION to GRANT
// rds_replication instead of ALTER ROLE … REPLICATION.
func TestCheckRDSReplicationRole(t *testing.T) {
	f := newFixture(t, fixtureOpts{partitions: 1})
	ctx := context.Background()
	mustExec(t, f.Pool, `CREATE ROLE rds_replication NOLOGIN`)
	t.Cleanup(func() {
		if _, err := f.Pool.Exec(ctx, `DROP ROLE rds_replication`); err != nil {
			t.Errorf("drop role rds_replication: %v", err)
		}
	})
	asRole := func(t *testing.T, member bool) checkRun {
		t.Helper()
		role, password := randName("rdsrepl"), randName("pw")
		mustExec(t, f.Pool, fmt.Sprintf(`CREATE ROLE %s LOGIN NOREPLICATION NOSUPERUSER PASSWORD '%s'`, role, password))
		t.Cleanup(func() {
			_, _ = f.Pool.Exec(ctx, fmt.Sprintf(`DROP OWNED BY %s`, role))
			if _, err := f.Pool.Exec(ctx, fmt.Sprintf(`DROP ROLE %s`, role)); err != nil {
				t.Errorf("drop role %s: %v", role, err)
			}
		})
		if member {
			mustExec(t, f.Pool, fmt.Sprintf(`GRANT rds_replication TO %s`, role))
		}
		mustExec(t, f.Pool, fmt.Sprintf(`GRANT SELECT ON %s, %s, walpost_position TO %s`, f.Table, f.PoisonTable, role))
		u, err := url.Parse(pgURL)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword(role, password)
		return runCheck(t, f.env("WALPOST_POSTGRES_URL="+u.String()))
	}
	t.Run("member", func(t *testing.T) {
		r := asRole(t, true)
		if d, ok := r.byStatus("OK")["replication"]; !ok || !strings.Contains(d, "member of rds_replication") {
			t.Errorf("replication not OK for a member of rds_replication:\n%s", r.Output)
		}
	})
	t.Run("not a member", func(t *testing.T) {
		r := asRole(t, false)
		expectFailures(t, r, map[string][]string{"replication": {"may not replicate", "GRANT rds_replication TO"}})
		if strings.Contains(r.byStatus("FAIL")["replication"], "ALTER ROLE") {
			t.Errorf("RDS hint suggests ALTER ROLE: %q", r.byStatus("FAIL")["replication"])
		}
	})
}

// TestCheckWalLevelNotLogical runs check against a second cluster with
// wal_level = replica whose schema is otherwise complete: wal_level is the
// only failure.
func TestCheckWalLevelNotLogical(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 1})
	scratchURL := scratchServer(t, "replica").url
	su, err := url.Parse(scratchURL)
	if err != nil {
		t.Fatal(err)
	}
	// The scratch cluster's own walpost schema, under the default names.
	env := f.env(
		"WALPOST_POSTGRES_URL="+scratchURL,
		"WALPOST_POSTGRES_TABLE=outbox",
		"WALPOST_POSTGRES_POISON_TABLE=poison_outbox",
		"WALPOST_POSTGRES_PUBLICATION=walpost_outbox",
		"WALPOST_POSTGRES_SLOT=walpost",
	)
	if err := runWalpost(t, env, "migrate"); err != nil {
		t.Fatalf("migrate the scratch cluster: %v", err)
	}
	r := runCheck(t, env)
	expectFailures(t, r, map[string][]string{"wal_level": {`"replica"`, "wal_level = logical", "restart PostgreSQL"}})
	if d := r.byStatus("OK")["postgres"]; !strings.Contains(d, ":"+su.Port()+"/") {
		t.Errorf("check did not connect to the scratch cluster: %q", d)
	}
}

// querier is what catalogDump reads through: a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// catalogDump describes the objects `walpost migrate` owns: the columns,
// constraints, indexes and triggers of outbox and poison_outbox (and the
// tables' oids, so a drop and re-create shows), the trigger function, the
// publication and the applied schema versions.
func catalogDump(t *testing.T, q querier) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	add := func(prefix, sql string, args ...any) {
		rows, err := q.Query(ctx, sql, args...)
		if err != nil {
			t.Fatalf("%s: %v", prefix, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: %v", prefix, err)
		}
		for _, l := range lines {
			out = append(out, prefix+" "+l)
		}
	}
	for _, table := range []string{"outbox", "poison_outbox"} {
		add(table, `SELECT format('oid %s %s', c.oid, c.relkind) FROM pg_class c WHERE c.oid = to_regclass($1)`, table)
		add(table, `SELECT format('column %s %s %s notnull=%s default=%s', a.attnum, a.attname, format_type(a.atttypid, a.atttypmod),
		                   a.attnotnull, coalesce(pg_get_expr(d.adbin, d.adrelid), '-'))
		            FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		            WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, table)
		add(table, `SELECT format('constraint %s %s', conname, pg_get_constraintdef(oid))
		            FROM pg_constraint WHERE conrelid = to_regclass($1) ORDER BY conname`, table)
		add(table, `SELECT format('index %s', pg_get_indexdef(indexrelid))
		            FROM pg_index WHERE indrelid = to_regclass($1) ORDER BY 1`, table)
		add(table, `SELECT format('trigger %s enabled=%s', pg_get_triggerdef(oid), tgenabled)
		            FROM pg_trigger WHERE tgrelid = to_regclass($1) AND NOT tgisinternal ORDER BY tgname`, table)
	}
	add("function", `SELECT pg_get_functiondef(p.oid) FROM pg_proc p WHERE p.proname = 'poison_outbox_refuse_delete'`)
	add("publication", `SELECT format('%s alltables=%s insert=%s update=%s delete=%s truncate=%s',
	                           pubname, puballtables, pubinsert, pubupdate, pubdelete, pubtruncate)
	                    FROM pg_publication WHERE pubname = 'walpost_outbox'`)
	add("publication", `SELECT format('table %I.%I', schemaname, tablename) FROM pg_publication_tables
	                    WHERE pubname = 'walpost_outbox' ORDER BY 1`)
	add("schema", `SELECT format('version %s applied=%s', version_id, is_applied) FROM `+migrations.VersionTable+` ORDER BY id`)
	return out
}

// TestMigrateTwiceSameSchema: a second `walpost migrate` reports the schema
// up to date and changes nothing; re-running the migration SQL itself (as
// when the version table is lost) changes nothing either.
func TestMigrateTwiceSameSchema(t *testing.T) {
	t.Parallel()
	needStack(t)
	ctx := context.Background()
	if err := runWalpost(t, nil, "migrate"); err != nil {
		t.Fatalf("first migrate: %v", err)
	}
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	before := catalogDump(t, conn)
	checkSchemaContract(t, before)

	out, err := walpostOutput(t, nil, "migrate")
	if err != nil {
		t.Fatalf("second migrate: %v\n%s", err, out)
	}
	if !strings.Contains(out, "schema up to date") {
		t.Errorf("second migrate did not report the schema up to date:\n%s", out)
	}
	if after := catalogDump(t, conn); !slices.Equal(before, after) {
		t.Errorf("second migrate changed the schema:\n%s", diffLines(before, after))
	}

	// The migration SQL again, in a transaction that is rolled back.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '10s'`); err != nil {
		t.Fatal(err)
	}
	files, err := fs.Glob(migrations.FS(), "*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no embedded migrations (%v)", err)
	}
	sort.Strings(files)
	for _, name := range files {
		b, err := fs.ReadFile(migrations.FS(), name)
		if err != nil {
			t.Fatal(err)
		}
		up, _, _ := strings.Cut(string(b), "-- +goose Down")
		// Simple protocol: the file holds several statements and DO blocks.
		if _, err := tx.Conn().PgConn().Exec(ctx, up).ReadAll(); err != nil {
			t.Fatalf("re-apply %s: %v", name, err)
		}
	}
	if again := catalogDump(t, tx); !slices.Equal(before, again) {
		t.Errorf("re-running the migration SQL changed the schema:\n%s", diffLines(before, again))
	}
}

// checkSchemaContract spot-checks the dump against DESIGN.md, Contracts.
func checkSchemaContract(t *testing.T, dump []string) {
	t.Helper()
	joined := strings.Join(dump, "\n")
	for _, want := range []string{
		"outbox column 1 id uuid notnull=t default=gen_random_uuid()",
		"outbox column 2 idempotency_key text notnull=t",
		"outbox column 3 payload jsonb notnull=t",
		"outbox column 4 created_at timestamp with time zone notnull=t default=now()",
		"outbox column 5 sent_at timestamp with time zone notnull=f",
		"outbox column 6 attempts integer notnull=t default=0",
		"outbox column 7 last_error text",
		"outbox column 8 topic text",
		"outbox column 9 partition_key text",
		"outbox column 10 event_type text",
		"outbox column 11 headers jsonb",
		"UNIQUE (idempotency_key)",
		"poison_outbox column", "commit_lsn pg_lsn notnull=t",
		"PRIMARY KEY (outbox_id, commit_lsn)", // 00002: one row per quarantined event
		"poisoned_at timestamp with time zone notnull=t default=now()",
		"replayed_at timestamp with time zone notnull=f",
		"replay_count integer notnull=t default=0",
		"BEFORE DELETE ON public.poison_outbox FOR EACH STATEMENT EXECUTE FUNCTION poison_outbox_refuse_delete() enabled=O",
		"BEFORE TRUNCATE ON public.poison_outbox FOR EACH STATEMENT EXECUTE FUNCTION poison_outbox_refuse_delete() enabled=O",
		"publication walpost_outbox alltables=f insert=t update=f delete=f truncate=f",
		"publication table public.outbox",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("schema lacks %q", want)
		}
	}
	pubTables := 0
	for _, l := range dump {
		if strings.HasPrefix(l, "publication table ") {
			pubTables++
		}
	}
	if pubTables != 1 {
		t.Errorf("walpost_outbox covers %d tables, want exactly outbox", pubTables)
	}
	if t.Failed() {
		t.Logf("catalog dump:\n%s", joined)
	}
}

func diffLines(a, b []string) string {
	var sb strings.Builder
	for _, l := range a {
		if !slices.Contains(b, l) {
			fmt.Fprintf(&sb, "- %s\n", l)
		}
	}
	for _, l := range b {
		if !slices.Contains(a, l) {
			fmt.Fprintf(&sb, "+ %s\n", l)
		}
	}
	if sb.Len() == 0 {
		return "(same lines, different order)"
	}
	return sb.String()
}

// TestPoisonOutboxRefusesDeleteAndTruncate: the trigger refuses every DELETE
// (also one that matches no row: it is a statement trigger) and TRUNCATE on
// poison_outbox, with its message and hint, and the row survives. All of it
// runs in a transaction that is rolled back, so the shared table is never
// touched even if the trigger were missing.
func TestPoisonOutboxRefusesDeleteAndTruncate(t *testing.T) {
	t.Parallel()
	needStack(t)
	ctx := context.Background()
	if err := runWalpost(t, nil, "migrate"); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '10s'`); err != nil {
		t.Fatal(err)
	}
	key := randName("poisoned")
	// outbox_id is NOT NULL since 00002: with commit_lsn it is the row's key.
	if _, err := tx.Exec(ctx, `INSERT INTO poison_outbox (idempotency_key, outbox_id, payload, created_at, topic, attempts, last_error, error_class, commit_lsn)
		VALUES ($1, gen_random_uuid(), '{}', now(), 'orders', 5, 'MESSAGE_TOO_LARGE', 'record', '0/16B3748')`, key); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`DELETE FROM poison_outbox`,
		fmt.Sprintf(`DELETE FROM poison_outbox WHERE idempotency_key = '%s'`, key),
		`DELETE FROM poison_outbox WHERE false`,
		`TRUNCATE poison_outbox`,
		`TRUNCATE TABLE ONLY poison_outbox`,
	} {
		t.Run(stmt, func(t *testing.T) {
			if _, err := tx.Exec(ctx, `SAVEPOINT refused`); err != nil {
				t.Fatal(err)
			}
			_, err := tx.Exec(ctx, stmt)
			if _, rbErr := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT refused`); rbErr != nil {
				t.Fatal(rbErr)
			}
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) {
				t.Fatalf("%s was not refused (err %v)", stmt, err)
			}
			if pgErr.Code != "42501" {
				t.Errorf("SQLSTATE %s, want 42501 (insufficient_privilege)", pgErr.Code)
			}
			if want := "rows of poison_outbox are never deleted: they are the only trace of a quarantined event"; pgErr.Message != want {
				t.Errorf("message %q, want %q", pgErr.Message, want)
			}
			if !strings.Contains(pgErr.Hint, "walpost poison replay --key KEY") {
				t.Errorf("hint %q does not point at walpost poison replay", pgErr.Hint)
			}
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM poison_outbox WHERE idempotency_key = $1`, key).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Errorf("after %s the quarantined row count is %d, want 1", stmt, n)
			}
		})
	}
}
