package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// TestMigrateConfiguredNames: walpost migrate creates the outbox, the
// quarantine (with its DELETE/TRUNCATE guard) and the publication under
// postgres.table, postgres.poison_table and postgres.publication; with the
// debezium profile it leaves the user's outbox table as it is and creates
// only the publication over it, the quarantine and walpost's own tables.
// A second run changes nothing.
func TestMigrateConfiguredNames(t *testing.T) {
	t.Parallel()
	needStack(t)
	ctx := context.Background()
	if err := runWalpost(t, nil, "migrate"); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	id := randName("m")
	for _, profile := range []string{"walpost", "debezium"} {
		table, poison, pub := "outbox_"+id+"_"+profile, "poison_"+id+"_"+profile, "pub_"+id+"_"+profile
		t.Cleanup(func() {
			_, _ = pool.Exec(ctx, `DROP PUBLICATION IF EXISTS `+pub)
			_, _ = pool.Exec(ctx, `DROP TABLE IF EXISTS `+table)
			_, _ = pool.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s DISABLE TRIGGER USER`, poison))
			_, _ = pool.Exec(ctx, `DROP TABLE IF EXISTS `+poison)
			_, _ = pool.Exec(ctx, `DROP TABLE IF EXISTS walpost_schema_version_`+poison)
		})
		columns := func(tbl string) string {
			t.Helper()
			var s string
			if err := pool.QueryRow(ctx, `SELECT coalesce(string_agg(attname, ',' ORDER BY attnum), '') FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped`, tbl).Scan(&s); err != nil {
				t.Fatal(err)
			}
			return s
		}
		wantOutbox := "id,idempotency_key,payload,created_at,sent_at,attempts,last_error,topic,partition_key,event_type,headers"
		if profile == "debezium" {
			mustExec(t, pool, fmt.Sprintf(`CREATE TABLE %s (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL, aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb)`, table))
			wantOutbox = "id,aggregatetype,aggregateid,type,payload"
		}
		env := []string{"WALPOST_POSTGRES_TABLE=" + table, "WALPOST_POSTGRES_POISON_TABLE=" + poison,
			"WALPOST_POSTGRES_PUBLICATION=" + pub, "WALPOST_MAPPING_PROFILE=" + profile}
		for run := 1; run <= 2; run++ {
			out, err := walpostOutput(t, env, "migrate")
			if err != nil {
				t.Fatalf("%s: migrate (run %d): %v\n%s", profile, run, err, out)
			}
			if run == 2 && !strings.Contains(out, "schema up to date") {
				t.Errorf("%s: second migrate: %s", profile, out)
			}
			if got := columns(table); got != wantOutbox {
				t.Errorf("%s run %d: outbox %s has columns %q, want %q", profile, run, table, got, wantOutbox)
			}
			if got := columns(poison); !strings.HasPrefix(got, "idempotency_key,outbox_id,payload,") {
				t.Errorf("%s run %d: quarantine %s has columns %q", profile, run, poison, got)
			}
			var tables string
			if err := pool.QueryRow(ctx, `SELECT coalesce(string_agg(tablename, ','), '') FROM pg_publication_tables WHERE pubname = $1`, pub).Scan(&tables); err != nil || tables != table {
				t.Errorf("%s run %d: publication %s covers %q (%v), want %s", profile, run, pub, tables, err, table)
			}
		}
		mustExec(t, pool, fmt.Sprintf(`INSERT INTO %s (idempotency_key, outbox_id, created_at, topic, attempts, last_error, error_class, commit_lsn) VALUES ('k', gen_random_uuid(), now(), 't', 1, 'e', 'c', '0/1')`, poison))
		if _, err := pool.Exec(ctx, `DELETE FROM `+poison); err == nil || !strings.Contains(err.Error(), "never deleted") {
			t.Errorf("%s: DELETE FROM %s: %v, want the guard's refusal", profile, poison, err)
		}
		if _, err := pool.Exec(ctx, `TRUNCATE `+poison); err == nil || !strings.Contains(err.Error(), "never deleted") {
			t.Errorf("%s: TRUNCATE %s: %v, want the guard's refusal", profile, poison, err)
		}
	}
}
