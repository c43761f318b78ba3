package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"
)

// converterProfile is one of the Kafka Connect converter set-ups users run,
// and the walpost format that claims to write the same bytes.
type converterProfile struct {
	format    string      // mapping.key_format and mapping.value_format
	converter [][2]string // the connector's key.converter / value.converter properties
	// tombstone sets the router's route.tombstone.on.empty.payload and
	// walpost's mapping.tombstone_on_empty_payload.
	tombstone bool
}

// name tells the profiles apart: the format, "_tombstone" added.
func (p converterProfile) name() string {
	if p.tombstone {
		return p.format + "_tombstone"
	}
	return p.format
}

var converterProfiles = []converterProfile{
	{"string", [][2]string{
		{"key.converter", "org.apache.kafka.connect.storage.StringConverter"},
		{"value.converter", "org.apache.kafka.connect.storage.StringConverter"},
	}, false},
	{"json", [][2]string{
		{"key.converter", "org.apache.kafka.connect.json.JsonConverter"},
		{"key.converter.schemas.enable", "false"},
		{"value.converter", "org.apache.kafka.connect.json.JsonConverter"},
		{"value.converter.schemas.enable", "false"},
	}, false},
	{"json_schema", [][2]string{
		{"key.converter", "org.apache.kafka.connect.json.JsonConverter"},
		{"key.converter.schemas.enable", "true"},
		{"value.converter", "org.apache.kafka.connect.json.JsonConverter"},
		{"value.converter.schemas.enable", "true"},
	}, false},
	{"json_schema", [][2]string{
		{"key.converter", "org.apache.kafka.connect.json.JsonConverter"},
		{"key.converter.schemas.enable", "true"},
		{"value.converter", "org.apache.kafka.connect.json.JsonConverter"},
		{"value.converter.schemas.enable", "true"},
	}, true},
}

// debeziumPrefix is the prefix of the topics Debezium writes for a profile:
// the string profile keeps the router's default replacement
// (outbox.event.${routedByValue}), the others are prefixed by their name so
// that all connectors run side by side. walpost writes to "wp." +
// Debezium's topic.
func debeziumPrefix(name string) string {
	if name == "string" {
		return ""
	}
	return name + "."
}

// compareSource is an outbox table of TestDebeziumBytes in Debezium's
// layout, with a publication of its own (walpost's covers only its
// outbox), the aggregate types of its rows and the converter profiles
// compared on it: one Debezium connector and one walpost per delivery
// mode for each.
type compareSource struct {
	suffix             string // of the slots, poison tables and connector names
	table, publication string
	types              []string
	profiles           []converterProfile
}

// deliveryMode: TestDebeziumBytes runs one walpost per profile and source
// in each delivery mode, with env added to its environment, writing to
// Debezium's topic with prefix in front.
type deliveryMode struct {
	name, prefix string
	env          []string
}

// TestDebeziumBytes runs the real Debezium (Kafka Connect standalone, the
// PostgreSQL connector and the Outbox Event Router from the jars
// scripts/debezium.sh resolves) and walpost's debezium profile on the same
// Debezium-layout tables, one connector per converter profile and source
// table, each on its own slot, and beside each one walpost per delivery
// mode, each on its own slot: at-least-once writing to "wp." + Debezium's
// topic, exactly-once (read with read_committed) to "wpx." + Debezium's
// topic. It writes the same rows once and compares, in a subtest per
// delivery mode sharing Debezium's records, each walpost record with
// Debezium's by their id header: topic, partition, key bytes, value
// bytes, header names and bytes (Debezium's __debezium.context.* headers
// aside), the row with a NULL payload included: under the router's
// defaults (route.tombstone.on.empty.payload=false) the key with a null
// value through the converter, and in the fourth profile (json_schema with
// route.tombstone.on.empty.payload=true and
// mapping.tombstone_on_empty_payload=true) a tombstone.
//
// The sources: the fixture's table (aggregateid varchar NOT NULL, payload
// jsonb) under every profile, and one with aggregateid bigint NOT NULL
// under the json and json_schema profiles, whose keys are JSON numbers
// ({"type":"int64","optional":false}) only with the column types: a
// walpost without them writes "42" and sends the record to another
// partition than Debezium.
//
// It needs a JDK (and Maven for the first install): WALPOST_DEBEZIUM=1
// (make test-debezium) runs it, otherwise it skips.
func TestDebeziumBytes(t *testing.T) {
	// Not in parallel: Kafka Connect creates and drops dozens of topics
	// at once, and the broker applies them one by one (seconds behind
	// under load), which other tests' new topics would wait behind.
	if os.Getenv("WALPOST_DEBEZIUM") != "1" {
		t.Skip("WALPOST_DEBEZIUM=1 (make test-debezium) runs Kafka Connect with Debezium against walpost")
	}
	f := newFixture(t, fixtureOpts{})
	debeziumTable(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	libs := debeziumLibs(t)

	suffix := strings.TrimPrefix(f.Topic, "topic_")
	intTable, intPub := f.Table+"_int", f.Publication+"_int"
	mustExec(t, f.Pool, fmt.Sprintf(`CREATE TABLE %s (
		id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
		aggregatetype varchar(255) NOT NULL,
		aggregateid bigint NOT NULL,
		type varchar(255) NOT NULL,
		payload jsonb)`, intTable))
	mustExec(t, f.Pool, fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert')`, intPub, intTable))
	t.Cleanup(func() {
		_, _ = f.Pool.Exec(context.Background(), fmt.Sprintf(`DROP PUBLICATION IF EXISTS %s`, intPub))
		_, _ = f.Pool.Exec(context.Background(), fmt.Sprintf(`DROP TABLE IF EXISTS %s`, intTable))
	})
	sources := []compareSource{
		{"", f.Table, f.Publication, []string{"Order_" + suffix, "Customer_" + suffix, "ship.ment-" + suffix}, converterProfiles},
		{"_int", intTable, intPub, []string{"Invoice_" + suffix}, converterProfiles[1:3]},
	}
	modes := []deliveryMode{
		{"at-least-once", "wp.", nil},
		{"exactly-once", "wpx.", f.exactlyOnceEnv()},
	}
	var topics []string
	for _, src := range sources {
		for _, p := range src.profiles {
			for _, ty := range src.types {
				dbz := debeziumPrefix(p.name()) + "outbox.event." + ty
				topics = append(topics, dbz)
				for _, m := range modes {
					topics = append(topics, m.prefix+dbz)
				}
			}
		}
	}
	resp, err := f.Admin.CreateTopics(ctx, 3, -1, nil, topics...)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp {
		if r.Err != nil {
			t.Fatalf("create topic %s: %v", r.Topic, r.Err)
		}
	}
	t.Cleanup(func() { _, _ = f.Admin.DeleteTopics(context.Background(), topics...) })

	// Debezium's slots exist before the rows (snapshot.mode=no_data streams
	// from them); each walpost creates its own when it starts.
	var connectors []dbzConnector
	for _, src := range sources {
		for _, p := range src.profiles {
			c := dbzConnector{profile: p, name: p.name() + src.suffix, slot: f.Slot + "_dbz_" + p.name() + src.suffix,
				table: src.table, publication: src.publication}
			mustExec(t, f.Pool, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, c.slot)
			t.Cleanup(func() { dropSlot(f, c.slot) })
			connectors = append(connectors, c)
		}
	}
	type walpost struct {
		name, poison string
		p            *proc
	}
	var walposts []walpost
	for _, m := range modes {
		for _, src := range sources {
			for _, p := range src.profiles {
				name := strings.TrimSuffix(m.prefix, ".") + "_" + p.name() + src.suffix
				slot := f.Slot + "_" + name
				poison := f.PoisonTable + "_" + name
				mustExec(t, f.Pool, fmt.Sprintf(`CREATE TABLE %s (LIKE poison_outbox INCLUDING ALL)`, poison))
				mustExec(t, f.Pool, fmt.Sprintf(`CREATE TRIGGER no_delete BEFORE DELETE ON %s FOR EACH STATEMENT EXECUTE FUNCTION poison_outbox_refuse_delete()`, poison))
				t.Cleanup(func() {
					dropSlot(f, slot)
					_, _ = f.Pool.Exec(context.Background(), `DELETE FROM walpost_position WHERE slot = $1`, slot)
					_, _ = f.Pool.Exec(context.Background(), fmt.Sprintf(`DROP TABLE IF EXISTS %s`, poison))
				})
				env := append([]string{"WALPOST_MAPPING_PROFILE=debezium",
					"WALPOST_POSTGRES_TABLE=" + src.table, "WALPOST_POSTGRES_PUBLICATION=" + src.publication,
					"WALPOST_POSTGRES_SLOT=" + slot, "WALPOST_POSTGRES_POISON_TABLE=" + poison,
					"WALPOST_MAPPING_TOPIC_TEMPLATE=" + m.prefix + debeziumPrefix(p.name()) + "outbox.event.${routedByValue}",
					"WALPOST_MAPPING_KEY_FORMAT=" + p.format, "WALPOST_MAPPING_VALUE_FORMAT=" + p.format,
					fmt.Sprintf("WALPOST_MAPPING_TOMBSTONE_ON_EMPTY_PAYLOAD=%v", p.tombstone)}, m.env...)
				walposts = append(walposts, walpost{m.name + "/" + p.name() + src.suffix, poison, f.start(env...)})
			}
		}
	}
	for _, w := range walposts {
		if !w.p.waitLog("streaming", 60*time.Second) {
			t.Fatalf("walpost (%s) did not start streaming:\n%s", w.name, tail(w.p.log, 40))
		}
	}

	// The rows: unicode (BMP and beyond), <>&, U+2028/2029, control
	// characters, quotes and backslashes, nested JSON and JSON scalars, in
	// payloads and keys, over several transactions and aggregate types;
	// bigint keys from one extreme to the other.
	payloads := []string{
		`{"a": 1}`,
		`{"note": "<b>&amp; café ☕ 😀</b>", "nested": {"a": [1, {"b": null}], "c": {"d": {"e": true}}}}`,
		`{"ls": "a` + "\u2028" + `b` + "\u2029" + `c", "q": "\"quoted\" and \\ back\\slash"}`,
		`{"ctl": "tab\t nl\n cr\r bs\b ff\f \u0001 \u001f \u007f"}`,
		`{"big": 12345678901234567890, "f": 1.50, "neg": -0.0, "e": 1e3}`,
		`[1, "two", {"three": [3]}]`,
		`"just a string <>&"`,
		`42`,
		`null`,
		`{}`,
	}
	keys := []string{"agg-1", "agg \"2\" <&>", "é☕😀", "agg\u2028line", "k\\3"}
	intKeys := []int64{42, 7, 0, -1, 1000000007, math.MaxInt64, math.MinInt64}
	want := map[string]int{} // profile → rows
	insert := func(src compareSource, rows func(tx pgx.Tx) int) {
		tx, err := f.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := rows(tx)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		for _, p := range src.profiles {
			want[p.name()] += n
		}
	}
	for i := 0; i < 4; i++ {
		insert(sources[0], func(tx pgx.Tx) int {
			for j, payload := range payloads {
				if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (aggregatetype, aggregateid, type, payload) VALUES ($1, $2, 'Created', $3)`, f.Table),
					sources[0].types[(i+j)%len(sources[0].types)], keys[(i*len(payloads)+j)%len(keys)], payload); err != nil {
					t.Fatal(err)
				}
			}
			return len(payloads)
		})
	}
	for i := 0; i < 2; i++ {
		insert(sources[1], func(tx pgx.Tx) int {
			for j, key := range intKeys {
				if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (aggregatetype, aggregateid, type, payload) VALUES ($1, $2, 'Created', $3)`, intTable),
					sources[1].types[0], key, payloads[(i*len(intKeys)+j)%len(payloads)]); err != nil {
					t.Fatal(err)
				}
			}
			return len(intKeys)
		})
	}
	var nullID string
	insert(sources[0], func(tx pgx.Tx) int {
		if err := tx.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %s (aggregatetype, aggregateid, type, payload) VALUES ($1, 'agg-null', 'Deleted', NULL) RETURNING id::text`, f.Table),
			sources[0].types[0]).Scan(&nullID); err != nil {
			t.Fatal(err)
		}
		return 1
	})

	workDir := t.TempDir()
	stop, restPort := startConnect(t, libs, workDir, connectors, nil)
	defer stop()

	// Consume every topic (read_committed: exactly-once walpost's records
	// once their transaction committed) until each side of each profile
	// holds its rows, and then 5 s more for late or extra records.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sides := []string{"dbz"}
	for _, m := range modes {
		sides = append(sides, m.prefix)
	}
	got := map[string]map[string][]*kgo.Record{} // "dbz/json", "wpx./json" → id → records
	complete := func() bool {
		for _, p := range converterProfiles {
			for _, side := range sides {
				if len(got[side+"/"+p.name()]) < want[p.name()] {
					return false
				}
			}
		}
		return true
	}
	var doneAt time.Time
	for ctx.Err() == nil && (doneAt.IsZero() || time.Since(doneAt) < 5*time.Second) {
		if msg := connectFailure(restPort); msg != "" {
			t.Fatalf("%s\nKafka Connect log (tail):\n%s", msg, tail(filepath.Join(workDir, "connect.log"), 60))
		}
		fctx, fcancel := context.WithTimeout(ctx, time.Second)
		fetches := cl.PollFetches(fctx)
		fcancel()
		fetches.EachRecord(func(r *kgo.Record) {
			side, rest := "dbz", r.Topic
			for _, m := range modes {
				if strings.HasPrefix(rest, m.prefix) {
					side, rest = m.prefix, strings.TrimPrefix(rest, m.prefix)
				}
			}
			name := "string"
			for _, p := range converterProfiles[1:] {
				if strings.HasPrefix(rest, debeziumPrefix(p.name())+"outbox.event.") {
					name = p.name()
				}
			}
			k := side + "/" + name
			if got[k] == nil {
				got[k] = map[string][]*kgo.Record{}
			}
			id := ""
			for _, h := range r.Headers {
				if h.Key == "id" {
					id = string(h.Value)
				}
			}
			got[k][id] = append(got[k][id], r)
		})
		if doneAt.IsZero() && complete() {
			doneAt = time.Now()
		}
	}
	if !complete() {
		for k, m := range got {
			t.Logf("%s: %d ids", k, len(m))
		}
		t.Fatalf("not every profile got its records from every side (want %v)\nKafka Connect log (tail):\n%s", want, tail(filepath.Join(workDir, "connect.log"), 60))
	}

	// The NULL payload: the router sends the key with a null value through
	// the converter (a tombstone with StringConverter, the bytes null, or
	// the schema envelope with a null payload), or, with
	// route.tombstone.on.empty.payload, a tombstone whatever the
	// converter. recordDiff compares walpost's with it; this checks that
	// Debezium really sent what the README says.
	wantNull := map[string]string{}
	for _, p := range converterProfiles {
		w := map[string]string{
			"string":      "",
			"json":        "null",
			"json_schema": `{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":null}`,
		}[p.format]
		if p.tombstone {
			w = ""
		}
		wantNull[p.name()] = w
		rs := got["dbz/"+p.name()][nullID]
		switch {
		case len(rs) != 1:
			t.Errorf("%s: Debezium sent %d records for the NULL-payload row, want 1", p.name(), len(rs))
		case string(rs[0].Value) != w || (w == "") != (rs[0].Value == nil):
			t.Errorf("%s: Debezium's value for the NULL payload %q (nil %v), want %q", p.name(), rs[0].Value, rs[0].Value == nil, w)
		}
	}

	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			for _, p := range converterProfiles {
				dbz, wp := got["dbz/"+p.name()], got[m.prefix+"/"+p.name()]
				compared := 0
				for id, drs := range dbz {
					wrs := wp[id]
					if len(drs) != 1 || len(wrs) != 1 {
						t.Errorf("%s: id %s: %d records from Debezium, %d from walpost, want 1 each", p.name(), id, len(drs), len(wrs))
						continue
					}
					if d := recordDiff(drs[0], wrs[0], m.prefix); d != "" {
						t.Errorf("%s: id %s: %s", p.name(), id, d)
					}
					compared++
				}
				for id := range wp {
					if _, ok := dbz[id]; !ok {
						t.Errorf("%s: id %s from walpost only", p.name(), id)
					}
				}
				if compared != want[p.name()] {
					t.Errorf("%s: compared %d records, want %d", p.name(), compared, want[p.name()])
				}
				if rs := wp[nullID]; len(rs) != 1 || (rs[0].Value == nil) != (wantNull[p.name()] == "") {
					t.Errorf("%s: walpost's records for the NULL-payload row %v, want one like Debezium's", p.name(), rs)
				}
				t.Logf("%s: %d records compared byte for byte (topic, partition, key, value, headers); NULL payload: both send value %q",
					p.name(), compared, wantNull[p.name()])
			}
			for _, w := range walposts {
				if !strings.HasPrefix(w.name, m.name+"/") {
					continue
				}
				var q int
				if err := f.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s`, w.poison)).Scan(&q); err != nil || q != 0 {
					t.Errorf("%s: %d poison rows (%v), want none", w.name, q, err)
				}
			}
		})
	}
}

// recordDiff describes how walpost's record w differs from Debezium's d:
// topic (w's is prefix + d's), partition, key, value, and the headers in
// order with Debezium's __debezium.context.* headers left out; "" if none.
func recordDiff(d, w *kgo.Record, prefix string) string {
	var diffs []string
	if w.Topic != prefix+d.Topic {
		diffs = append(diffs, fmt.Sprintf("topic %s, Debezium's %s", w.Topic, d.Topic))
	}
	if w.Partition != d.Partition {
		diffs = append(diffs, fmt.Sprintf("partition %d, Debezium's %d", w.Partition, d.Partition))
	}
	if !bytes.Equal(w.Key, d.Key) || (w.Key == nil) != (d.Key == nil) {
		diffs = append(diffs, fmt.Sprintf("key %q, Debezium's %q", w.Key, d.Key))
	}
	if !bytes.Equal(w.Value, d.Value) || (w.Value == nil) != (d.Value == nil) {
		diffs = append(diffs, fmt.Sprintf("value %q, Debezium's %q", w.Value, d.Value))
	}
	hs := func(r *kgo.Record) string {
		var out []string
		for _, h := range r.Headers {
			if strings.HasPrefix(h.Key, "__debezium.context.") {
				continue
			}
			out = append(out, fmt.Sprintf("%q=%q", h.Key, h.Value))
		}
		return strings.Join(out, " ")
	}
	if hw, hd := hs(w), hs(d); hw != hd {
		diffs = append(diffs, fmt.Sprintf("headers %s, Debezium's %s", hw, hd))
	}
	return strings.Join(diffs, "; ")
}

func dropSlot(f *fixture, slot string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, err := f.Pool.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			f.t.Logf("cleanup: replication slot %s NOT dropped: %v", slot, err)
			return
		}
	}
}

// debeziumLibs resolves Kafka Connect and Debezium with scripts/debezium.sh
// install (a no-op once done) and returns the directory of jars.
func debeziumLibs(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(repoRoot, "scripts", "debezium.sh"), "install")
	cmd.Dir = repoRoot
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("scripts/debezium.sh install: %v\n%s", err, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// dbzConnector is one Debezium connector of startConnect: the router
// under its defaults but for the converter profile's topic prefix, on
// slot, streaming table through publication; name tells it apart (its
// connector name and topic.prefix).
type dbzConnector struct {
	profile                        converterProfile
	name, slot, table, publication string
	// extra are more connector properties (transforms.outbox.*).
	extra [][2]string
}

// startConnect starts Kafka Connect standalone with the connectors; jvm
// are more JVM arguments (system properties), before the classpath, and
// each of more is a directory of jars added to it. It returns a function
// that stops the JVM (also run at cleanup) and the port of the worker's
// REST API.
func startConnect(t *testing.T, libs, workDir string, connectors []dbzConnector, jvm []string, more ...string) (stop func(), restPort int) {
	t.Helper()
	pc, err := pgconn.ParseConfig(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	restPort = freePort(t)
	worker := [][2]string{
		{"bootstrap.servers", strings.Join(brokers, ",")},
		{"key.converter", "org.apache.kafka.connect.storage.StringConverter"},
		{"value.converter", "org.apache.kafka.connect.storage.StringConverter"},
		{"offset.storage.file.filename", filepath.Join(workDir, "connect.offsets")},
		{"offset.flush.interval.ms", "1000"},
		{"listeners", "http://127.0.0.1:" + strconv.Itoa(restPort)},
		{"plugin.discovery", "service_load"},
	}
	cp := []string{filepath.Join(libs, "*")}
	for _, d := range more {
		cp = append(cp, filepath.Join(d, "*"))
	}
	args := append([]string{"-Xms128M", "-Xmx1G", "-Dlog4j2.configurationFile=" + filepath.Join(libs, "log4j2.properties")}, jvm...)
	args = append(args, "-cp", strings.Join(cp, string(os.PathListSeparator)), "org.apache.kafka.connect.cli.ConnectStandalone", writeProps(t, workDir, "worker", worker))
	for _, dc := range connectors {
		p := dc.profile
		c := [][2]string{
			{"name", "walpost-compare-" + dc.name},
			{"connector.class", "io.debezium.connector.postgresql.PostgresConnector"},
			{"tasks.max", "1"},
			{"database.hostname", pc.Host},
			{"database.port", strconv.Itoa(int(pc.Port))},
			{"database.user", pc.User},
			{"database.password", pc.Password},
			{"database.dbname", pc.Database},
			{"database.sslmode", "disable"},
			{"plugin.name", "pgoutput"},
			{"slot.name", dc.slot},
			{"slot.drop.on.stop", "false"},
			{"publication.name", dc.publication},
			{"publication.autocreate.mode", "disabled"},
			{"snapshot.mode", "no_data"},
			{"table.include.list", "public." + dc.table},
			{"topic.prefix", "walpost_compare_" + dc.name},
			{"tombstones.on.delete", "false"},
			{"transforms", "outbox"},
			{"transforms.outbox.type", "io.debezium.transforms.outbox.EventRouter"},
		}
		if p.name() != "string" {
			c = append(c, [2]string{"transforms.outbox.route.topic.replacement", debeziumPrefix(p.name()) + "outbox.event.${routedByValue}"})
		}
		if p.tombstone {
			c = append(c, [2]string{"transforms.outbox.route.tombstone.on.empty.payload", "true"})
		}
		c = append(c, p.converter...)
		c = append(c, dc.extra...)
		args = append(args, writeProps(t, workDir, "connector-"+dc.name, c))
	}
	logFile, err := os.Create(filepath.Join(workDir, "connect.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("java", args...)
	cmd.Dir = workDir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start java: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logFile.Close(); close(done) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop, restPort
}

func writeProps(t *testing.T, dir, name string, kv [][2]string) string {
	t.Helper()
	var b strings.Builder
	for _, p := range kv {
		b.WriteString(p[0] + "=" + strings.ReplaceAll(p[1], `\`, `\\`) + "\n")
	}
	path := filepath.Join(dir, name+".properties")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// connectFailure describes a failed connector or task from the REST API of
// the worker on port; "" while all is well or the API is not up yet.
func connectFailure(port int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/connectors?expand=status", port), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var st map[string]struct {
		Status struct {
			Connector struct {
				State string `json:"state"`
				Trace string `json:"trace"`
			} `json:"connector"`
			Tasks []struct {
				State string `json:"state"`
				Trace string `json:"trace"`
			} `json:"tasks"`
		} `json:"status"`
	}
	if json.NewDecoder(resp.Body).Decode(&st) != nil {
		return ""
	}
	var names []string
	for n := range st {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := st[n].Status
		if s.Connector.State == "FAILED" {
			return n + " failed: " + firstLine(s.Connector.Trace)
		}
		for _, tk := range s.Tasks {
			if tk.State == "FAILED" {
				return n + " task failed: " + tk.Trace
			}
		}
	}
	return ""
}

func firstLine(s string) string { return strings.SplitN(s, "\n", 2)[0] }
