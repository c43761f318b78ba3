package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/verify"
)

// Tests of walpost resend (docs/resend.md).

// inversionBound bounds how far apart the commit timestamps of two
// transactions committed in the other order may be (TestResendLive).
const inversionBound = 50 * time.Millisecond

var resendRowsRE = regexp.MustCompile(`rows: +(\d+) of (\d+) produced`)

// eventTypes are the writers' event types, in turn.
var eventTypes = []string{"order.created", "order.paid", "order.shipped"}

// typedLoad is writers inserting rows of eventTypes, recording when each
// transaction's COMMIT returned.
type typedLoad struct {
	f        *fixture
	pool     *pgxpool.Pool
	stopping chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	expected []verify.Expected
	commitAt map[string]time.Time
	failed   int
}

func startTypedLoad(t *testing.T, f *fixture, writers, maxTxn int, pause time.Duration) *typedLoad {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(f.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = int32(writers + 1)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := &typedLoad{f: f, pool: pool, stopping: make(chan struct{}), commitAt: map[string]time.Time{}}
	insert := fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload, event_type) VALUES ($1, $2, $3)`, f.Table)
	payload := `{"data": "` + strings.Repeat("x", 150) + `"}`
	for w := range writers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for n := 0; ; n++ {
				select {
				case <-l.stopping:
					return
				default:
				}
				size := 1 + (n*7+w*3)%maxTxn
				txn := fmt.Sprintf("w%d-t%d", w, n)
				exp := make([]verify.Expected, size)
				b := &pgx.Batch{}
				for i := range exp {
					exp[i] = verify.Expected{Key: fmt.Sprintf("%s-r%d", txn, i), Txn: txn, Index: i}
					b.Queue(insert, exp[i].Key, payload, eventTypes[(w+n+i)%len(eventTypes)])
				}
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() })
				at := time.Now()
				cancel()
				l.mu.Lock()
				if err != nil {
					l.failed++
				} else {
					l.expected = append(l.expected, exp...)
					for _, e := range exp {
						l.commitAt[e.Key] = at
					}
				}
				l.mu.Unlock()
				select {
				case <-l.stopping:
					return
				case <-time.After(pause):
				}
			}
		}()
	}
	return l
}

// finish stops the writers and returns the committed events.
func (l *typedLoad) finish(t *testing.T) []verify.Expected {
	t.Helper()
	close(l.stopping)
	l.wg.Wait()
	l.pool.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed > 0 {
		t.Errorf("%d writer transactions failed", l.failed)
	}
	return slices.Clone(l.expected)
}

// committedIn returns the commit times of the keys committed in [from, to).
func (l *typedLoad) committedIn(from, to time.Time) map[string]time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]time.Time{}
	for k, at := range l.commitAt {
		if !at.Before(from) && at.Before(to) {
			out[k] = at
		}
	}
	return out
}

// seenRecord is one record a liveWatch received.
type seenRecord struct {
	key       string
	partition int32
	offset    int64
	commitLSN pglogrepl.LSN
	resent    bool
	at        time.Time
}

// liveWatch consumes the fixture's topic from its start while the test
// runs: every record, and when each key's first live (not resent) record
// arrived.
type liveWatch struct {
	mu       sync.Mutex
	recs     []seenRecord
	liveAt   map[string]time.Time
	cancel   context.CancelFunc
	done     chan struct{}
	stopOnce sync.Once
}

func watchLive(t *testing.T, f *fixture) *liveWatch {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(f.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &liveWatch{liveAt: map[string]time.Time{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer cl.Close()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			w.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				s := seenRecord{key: string(r.Key), partition: r.Partition, offset: r.Offset, at: now}
				for _, h := range r.Headers {
					switch h.Key {
					case "commit_lsn":
						s.commitLSN, _ = pglogrepl.ParseLSN(string(h.Value))
					case "walpost_resent":
						s.resent = string(h.Value) == "true"
					}
				}
				if _, ok := w.liveAt[s.key]; !ok && !s.resent {
					w.liveAt[s.key] = now
				}
				w.recs = append(w.recs, s)
			})
			w.mu.Unlock()
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *liveWatch) stop() { w.stopOnce.Do(func() { w.cancel(); <-w.done }) }

func (w *liveWatch) records() []seenRecord {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.recs)
}

// waitFor waits until cond holds over the records received so far.
func (w *liveWatch) waitFor(t *testing.T, timeout time.Duration, what string, cond func(recs []seenRecord, liveAt map[string]time.Time) bool) {
	t.Helper()
	waitFor(t, timeout, what, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return cond(w.recs, w.liveAt)
	})
}

// latency is commit → first live receipt over the keys of commitAt.
func (w *liveWatch) latency(commitAt map[string]time.Time) latencyStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	ds := make([]time.Duration, 0, len(commitAt))
	for k, c := range commitAt {
		if s, ok := w.liveAt[k]; ok {
			ds = append(ds, s.Sub(c))
		}
	}
	slices.Sort(ds)
	q := func(p float64) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		i := int(p*float64(len(ds))+0.999999) - 1
		return ds[min(max(i, 0), len(ds)-1)]
	}
	return latencyStats{n: len(ds), p50: q(0.50), p99: q(0.99), max: q(1)}
}

// matchingKeys lists the keys of the table's rows of event type typ.
func matchingKeys(t *testing.T, pool *pgxpool.Pool, table, typ string) map[string]bool {
	t.Helper()
	rows, err := pool.Query(context.Background(), fmt.Sprintf(`SELECT idempotency_key FROM %s WHERE event_type = $1`, table), typ)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]bool, len(keys))
	for _, k := range keys {
		out[k] = true
	}
	return out
}

// orderRanks ranks the rows of keys in resend's documented order (commit
// timestamp, xid, command id, ctid) and returns each key's rank and
// commit timestamp.
func orderRanks(t *testing.T, pool *pgxpool.Pool, table string, keys []string) (map[string]int, map[string]time.Time) {
	t.Helper()
	rows, err := pool.Query(context.Background(), fmt.Sprintf(`
		SELECT idempotency_key, pg_xact_commit_timestamp(xmin),
		       row_number() OVER (ORDER BY COALESCE(pg_xact_commit_timestamp(xmin), created_at), xmin::text::bigint, cmin::text::bigint, ctid)
		FROM %s WHERE idempotency_key = ANY($1)`, table), keys)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	rank, ts := map[string]int{}, map[string]time.Time{}
	for rows.Next() {
		var k string
		var at *time.Time
		var r int
		if err := rows.Scan(&k, &at, &r); err != nil {
			t.Fatal(err)
		}
		rank[k] = r
		if at != nil {
			ts[k] = *at
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return rank, ts
}

// TestResendLive is issue 34's acceptance of walpost resend: on a running
// pipeline with 8 writers (track_commit_timestamp on), walpost resend
// --since 10m --where "event_type = 'order.created'" re-produces exactly
// the matching committed rows (every one committed before it started,
// none of another type, each once), marked walpost_resent: true with
// commit_lsn 0/0, in commit order per partition, while walpost run keeps
// streaming from its slot (same walsender, nothing lost or out of order)
// and the live stream's commit→visible latency stays within 2× of before.
// (Mutations: ORDER BY id in the selection fails the order check; the
// predicate dropped from the selection fails "exactly"; Resent unset
// fails the marker count.)
func TestResendLive(t *testing.T) {
	t.Parallel()
	srv := scratchServer(t, "logical")
	pool, err := pgxpool.New(context.Background(), srv.url)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, pool, `ALTER SYSTEM SET track_commit_timestamp = on`)
	pool.Close()
	if err := srv.ctl("pg-restart"); err != nil {
		t.Fatal(err)
	}
	if err := runWalpost(t, []string{"WALPOST_POSTGRES_URL=" + srv.url}, "migrate"); err != nil {
		t.Fatalf("walpost migrate on the scratch cluster: %v", err)
	}
	f := newFixture(t, fixtureOpts{partitions: 3, server: srv})
	env := []string{"WALPOST_LOG_LEVEL=info"}
	p := f.start(env...)
	waitStreaming(t, p)
	w := watchLive(t, f)
	load := startTypedLoad(t, f, 8, 4, 5*time.Millisecond)

	// The baseline: the live stream alone.
	t0 := time.Now()
	time.Sleep(8 * time.Second) // a measurement window, not a wait for a condition
	t1 := time.Now()
	pid := slotPID(f)
	before := matchingKeys(t, f.Pool, f.Table, "order.created")

	progress := filepath.Join(t.TempDir(), "resend.json")
	out, code := recoveryCommand(t, f.env(env...), "resend", "--since", "10m", "--where", "event_type = 'order.created'", "--progress-file", progress)
	t2 := time.Now()
	if code != 0 {
		t.Fatalf("walpost resend: exit %d", code)
	}
	m := resendRowsRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("report lacks the rows line:\n%s", out)
	}
	produced, _ := strconv.Atoi(m[1])
	if pid2 := slotPID(f); pid2 != pid || pid == 0 {
		t.Errorf("the slot's walsender was pid %d before the resend and %d after: resend must not touch the slot", pid, pid2)
	}
	// The live stream during a second after the resend too (its records
	// may still be in the brokers' queues).
	time.Sleep(time.Second) // a measurement window
	expected := load.finish(t)
	t3 := time.Now()
	after := matchingKeys(t, f.Pool, f.Table, "order.created")

	want := map[string]bool{}
	for _, e := range expected {
		want[e.Key] = true
	}
	w.waitFor(t, 30*time.Second, "every committed key live and every resent record", func(recs []seenRecord, liveAt map[string]time.Time) bool {
		resent := 0
		for _, r := range recs {
			if r.resent {
				resent++
			}
		}
		for k := range want {
			if _, ok := liveAt[k]; !ok {
				return false
			}
		}
		return resent >= produced
	})
	w.stop()
	recs := w.records()

	// The live stream: every committed event, in order, nothing else.
	var live []verify.Observed
	var resent []seenRecord
	for _, r := range recs {
		if r.resent {
			resent = append(resent, r)
			continue
		}
		live = append(live, verify.Observed{Key: r.key, Partition: r.partition, Offset: r.offset, CommitLSN: r.commitLSN})
	}
	rep := verify.Validate(expected, live)
	t.Logf("live stream: %s", rep)
	if !rep.OK() || rep.Unexpected != 0 {
		t.Errorf("the live stream beside the resend: %s", rep)
	}

	// Exactly the matching rows: each once, all of type order.created,
	// every one committed before the resend started.
	got := map[string]int{}
	for _, r := range resent {
		got[r.key]++
		if r.commitLSN != 0 {
			t.Errorf("resent %s carries commit_lsn %s, want 0/0", r.key, r.commitLSN)
		}
	}
	dups, wrong := 0, 0
	for k, n := range got {
		if n > 1 {
			dups++
		}
		if !after[k] {
			wrong++
			if wrong <= 5 {
				t.Errorf("resent %s, which is not an order.created row", k)
			}
		}
	}
	missing := 0
	for k := range before {
		if got[k] == 0 {
			missing++
			if missing <= 5 {
				t.Errorf("order.created row %s, committed before the resend, was not resent", k)
			}
		}
	}
	if dups > 0 || len(resent) != produced || len(got) != produced {
		t.Errorf("%d resent records of %d keys (%d resent twice); the report says %d produced", len(resent), len(got), dups, produced)
	}
	t.Logf("resend: %d rows (%d order.created rows committed before it started, %d by the end of the writers); %d wrong, %d missing",
		produced, len(before), len(after), wrong, missing)

	// Commit order per partition: the documented order (commit timestamp,
	// xid, command, ctid) exactly. Against the true commit order (the
	// live records' commit LSNs) a pair may be inverted only when its
	// commit timestamps are close: a timestamp is taken before the commit
	// record is inserted, and a backend descheduled in between (this
	// host is loaded) commits behind a later timestamp.
	keys := make([]string, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	rank, commitTS := orderRanks(t, f.Pool, f.Table, keys)
	lsnOf := map[string]pglogrepl.LSN{}
	for _, r := range recs {
		if !r.resent {
			lsnOf[r.key] = r.commitLSN
		}
	}
	type prev struct {
		key  string
		rank int
	}
	last := map[int32]prev{}
	outOfOrder, inversions, closeInversions := 0, 0, 0
	for _, r := range resent {
		pr, ok := last[r.partition]
		if ok {
			if rank[r.key] < pr.rank {
				outOfOrder++
				if outOfOrder <= 5 {
					t.Errorf("partition %d: resent %s (rank %d) after %s (rank %d)", r.partition, r.key, rank[r.key], pr.key, pr.rank)
				}
			}
			if lsnOf[r.key] < lsnOf[pr.key] {
				inversions++
				if d := commitTS[pr.key].Sub(commitTS[r.key]); d < inversionBound {
					closeInversions++
				}
			}
		}
		last[r.partition] = prev{r.key, rank[r.key]}
	}
	if inversions != closeInversions {
		t.Errorf("%d resent records follow one with a later commit LSN, %d of them with commit timestamps %s or more apart", inversions, inversions-closeInversions, inversionBound)
	}
	t.Logf("order: %d resent records out of the documented order; %d of %d follow one with a later commit LSN (commit timestamps less than %s apart)", outOfOrder, inversions, len(resent), inversionBound)

	// The live stream's latency, before and during the resend.
	base := w.latency(load.committedIn(t0, t1))
	during := w.latency(load.committedIn(t1, t2.Add(time.Second)))
	tail := w.latency(load.committedIn(t2.Add(time.Second), t3))
	t.Logf("commit→visible: before p50 %s p99 %s max %s (%d events); during the resend (%s) p50 %s p99 %s max %s (%d events); after p50 %s p99 %s (%d events)",
		ms(base.p50), ms(base.p99), ms(base.max), base.n, t2.Sub(t1).Round(time.Millisecond), ms(during.p50), ms(during.p99), ms(during.max), during.n,
		ms(tail.p50), ms(tail.p99), tail.n)
	// Where it went: p99 per second of commit time around the resend.
	var buckets []string
	for from := t1.Add(-2 * time.Second); from.Before(t2.Add(time.Second)); from = from.Add(time.Second) {
		b := w.latency(load.committedIn(from, from.Add(time.Second)))
		buckets = append(buckets, fmt.Sprintf("%+.0fs: p99 %s (%d)", from.Sub(t1).Seconds(), ms(b.p99), b.n))
	}
	t.Logf("commit→visible per second from the resend's start: %s", strings.Join(buckets, "; "))
	if base.n == 0 || during.n == 0 {
		t.Fatalf("no latency sample: %d before, %d during", base.n, during.n)
	}
	// Latency is a measurement, not a property a loaded test machine can
	// hold: make test logs it; the acceptance run (WALPOST_ACCEPTANCE=1,
	// a quiet machine) holds the live stream's p99 within 2× of before.
	if os.Getenv("WALPOST_ACCEPTANCE") == "1" && during.p99 > 2*base.p99 {
		t.Errorf("the live stream's latency during the resend (p50 %s, p99 %s) is above 2× of before (p50 %s, p99 %s)", ms(during.p50), ms(during.p99), ms(base.p50), ms(base.p99))
	}
}

// TestResendResume: a resend interrupted (SIGINT) half way records its
// acknowledged prefix; walpost resend --resume continues after it with the
// recorded selection. Every matching row is resent, in order, none twice,
// and a third run without --resume starts a new resend only once the
// first finished. (Mutations: the query not continuing after the cursor
// fails "none twice"; the progress not recorded on the interruption fails
// it too.)
func TestResendResume(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 3})
	ctx := context.Background()
	// 3000 rows in 30 transactions, every other row matching.
	for txn := range 30 {
		b := &pgx.Batch{}
		for i := range 100 {
			typ := eventTypes[(txn*100+i)%2]
			b.Queue(fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload, event_type) VALUES ($1, '{"x": 1}', $2)`, f.Table), fmt.Sprintf("r-t%d-%d", txn, i), typ)
		}
		if err := pgx.BeginFunc(ctx, f.Pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() }); err != nil {
			t.Fatal(err)
		}
	}
	matching := matchingKeys(t, f.Pool, f.Table, "order.created")
	progress := filepath.Join(t.TempDir(), "resend.json")
	args := []string{"resend", "--where", "event_type = 'order.created'", "--progress-file", progress}

	// The first run, slowed to 500 rows/s, interrupted once 300 are in.
	needStack(t)
	cmd := exec.Command(binary, append(args, "--max-rate", "500")...)
	cmd.SysProcAttr = childAttr()
	cmd.Env = append(baseEnv(), f.env("WALPOST_LOG_LEVEL=info")...)
	var first strings.Builder
	cmd.Stdout, cmd.Stderr = &first, &first
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	waitFor(t, 30*time.Second, "300 rows recorded in the progress file", func() bool {
		b, _ := os.ReadFile(progress)
		m := regexp.MustCompile(`"produced": (\d+)`).FindSubmatch(b)
		n := 0
		if m != nil {
			n, _ = strconv.Atoi(string(m[1]))
		}
		return n >= 300
	})
	_ = cmd.Process.Signal(syscall.SIGINT)
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("walpost resend did not stop on SIGINT:\n%s", first.String())
	}
	t.Logf("first run:\n%s", first.String())
	if err == nil || !strings.Contains(first.String(), "interrupted") || !strings.Contains(first.String(), "--resume") {
		t.Fatalf("the interrupted resend: %v, want exit 1 saying interrupted and --resume", err)
	}

	// A new resend is refused while this one is unfinished.
	out, code := recoveryCommand(t, f.env("WALPOST_LOG_LEVEL=info"), args...)
	if code == 0 || !strings.Contains(out, "--resume") {
		t.Errorf("a second resend over the unfinished one: exit %d, want it refused naming --resume", code)
	}
	out, code = recoveryCommand(t, f.env("WALPOST_LOG_LEVEL=info"), "resend", "--resume", "--progress-file", progress)
	if code != 0 || !strings.Contains(out, "resumed:") || !strings.Contains(out, "(finished)") {
		t.Fatalf("walpost resend --resume: exit %d", code)
	}

	recs := f.consumeAllWith(t, len(matching), time.Minute)
	got := map[string]int{}
	for _, r := range recs {
		if r.Headers["walpost_resent"] != "true" {
			t.Errorf("record %s without walpost_resent", r.Key)
		}
		got[r.Key]++
	}
	dups := 0
	for k, n := range got {
		if !matching[k] {
			t.Errorf("resent %s, which does not match", k)
		}
		if n > 1 {
			dups++
		}
	}
	if len(got) != len(matching) || dups > 0 {
		t.Errorf("resent %d of %d matching keys, %d twice; want each once", len(got), len(matching), dups)
	}
	// created_at order here (track_commit_timestamp off): the insert order
	// of this single writer, per partition.
	type place struct{ txn, i int }
	last := map[int32]place{}
	for _, r := range recs {
		var p place
		if _, err := fmt.Sscanf(r.Key, "r-t%d-%d", &p.txn, &p.i); err != nil {
			t.Fatalf("key %q: %v", r.Key, err)
		}
		if l, ok := last[r.Partition]; ok && (p.txn < l.txn || (p.txn == l.txn && p.i < l.i)) {
			t.Errorf("partition %d: %s after r-t%d-%d", r.Partition, r.Key, l.txn, l.i)
		}
		last[r.Partition] = p
	}
	// Finished: a new resend is no longer refused; --topic sends it to
	// another topic, which must exist.
	redrive := f.Topic + "_redrive"
	out, code = recoveryCommand(t, f.env("WALPOST_LOG_LEVEL=info"), "resend", "--key", "r-t0-0", "--topic", redrive, "--progress-file", progress)
	if code != 1 || !strings.Contains(out, "--topic") || !strings.Contains(out, "does not exist") {
		t.Errorf("a resend to a missing --topic: exit %d, want 1 naming --topic and that it does not exist", code)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if resp, err := f.Admin.CreateTopic(cctx, 1, -1, nil, redrive); err != nil || resp.Err != nil {
		t.Fatalf("create %s: %v %v", redrive, err, resp.Err)
	}
	t.Cleanup(func() { _, _ = f.Admin.DeleteTopics(context.Background(), redrive) })
	waitFor(t, 30*time.Second, "the broker's metadata to list "+redrive, func() bool {
		td, err := f.Admin.ListTopics(cctx, redrive)
		return err == nil && td[redrive].Err == nil && len(td[redrive].Partitions) == 1 && td[redrive].Partitions[0].Leader >= 0
	})
	if _, code := recoveryCommand(t, f.env("WALPOST_LOG_LEVEL=info"), "resend", "--key", "r-t0-0", "--topic", redrive, "--progress-file", progress); code != 0 {
		t.Fatalf("a new resend after the finished one, to --topic %s: exit %d", redrive, code)
	}
	other := &fixture{t: t, Topic: redrive}
	got2 := other.consumeAll(t, 1, 30*time.Second)
	if len(got2) != 1 || got2[0].Key != "r-t0-0" || got2[0].Headers["walpost_resent"] != "true" {
		t.Errorf("--topic %s holds %d records %v, want r-t0-0 marked walpost_resent", redrive, len(got2), got2)
	}
}

// insertTyped inserts n rows keyed prefix-t<txn>-<i> in transactions of
// 100, every other row of type order.created, and returns their keys by
// type.
func insertTyped(t *testing.T, f *fixture, prefix string, n int) map[string][]string {
	t.Helper()
	ctx := context.Background()
	byType := map[string][]string{}
	for txn := 0; txn*100 < n; txn++ {
		b := &pgx.Batch{}
		for i := 0; i < 100 && txn*100+i < n; i++ {
			typ := eventTypes[(txn*100+i)%2]
			key := fmt.Sprintf("%s-t%d-%d", prefix, txn, i)
			b.Queue(fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload, event_type) VALUES ($1, '{"x": 1}', $2)`, f.Table), key, typ)
			byType[typ] = append(byType[typ], key)
		}
		if err := pgx.BeginFunc(ctx, f.Pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() }); err != nil {
			t.Fatal(err)
		}
	}
	return byType
}

// TestResendExactlyOnce: in delivery.mode exactly-once, walpost resend
// beside a streaming walpost run produces inside Kafka transactions of its
// own transactional id: read_committed consumers see every matching row
// once more (marked), the others once, and walpost run is not fenced: it
// keeps streaming and committing after the resend. (Mutation: resend
// using the slot's transactional id fences walpost run, which then exits
// and the rows written after the resend never arrive.)
func TestResendExactlyOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{partitions: 3})
	env := f.exactlyOnceEnv("WALPOST_LOG_LEVEL=info")
	p := f.start(env...)
	waitStreaming(t, p)
	before := insertTyped(t, f, "b", 600)
	waitFor(t, time.Minute, "the rows in committed transactions", func() bool {
		return f.countKeys(t, "b-", kgo.FetchIsolationLevel(kgo.ReadCommitted())) >= 600
	})

	progress := filepath.Join(t.TempDir(), "resend.json")
	out, code := recoveryCommand(t, f.env(env...), "resend", "--where", "event_type = 'order.created'", "--progress-file", progress)
	if code != 0 {
		t.Fatalf("walpost resend in exactly-once mode: exit %d", code)
	}
	if !regexp.MustCompile(`exactly-once: +[1-9]\d* Kafka transaction\(s\) of walpost-` + f.Slot + `-\d+-resend`).MatchString(out) {
		t.Errorf("the report does not name resend's own transactions:\n%s", out)
	}
	after := insertTyped(t, f, "a", 100)
	alive(t, p, "after the resend")

	recs := f.consumeAllWith(t, 700, time.Minute, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	live, resent := map[string]int{}, map[string]int{}
	for _, r := range recs {
		if r.Headers["walpost_resent"] == "true" {
			resent[r.Key]++
		} else {
			live[r.Key]++
		}
	}
	for _, keys := range [][]string{before["order.created"], before["order.paid"], after["order.created"], after["order.paid"]} {
		for _, k := range keys {
			if live[k] != 1 {
				t.Errorf("%s: %d live copies read_committed, want 1", k, live[k])
			}
		}
	}
	for _, k := range before["order.created"] {
		if resent[k] != 1 {
			t.Errorf("%s: %d resent copies read_committed, want 1", k, resent[k])
		}
	}
	if len(resent) != len(before["order.created"]) {
		t.Errorf("%d keys resent, want the %d order.created rows", len(resent), len(before["order.created"]))
	}
	if n := logCount(p, "fenced"); n > 0 {
		t.Errorf("walpost run logged %d fencing lines:\n%s", n, tailOwn(p.log, 20))
	}
}
