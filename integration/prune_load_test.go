package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pruneLoadRows is how many confirmed rows TestPruneMillionRowsConcurrentWriter
// prunes.
const pruneLoadRows = 1_000_000

// TestPruneMillionRowsConcurrentWriter: walpost prune deletes 1M confirmed
// rows while a writer inserts into the same outbox one row per
// transaction. The writer must never wait on a lock prune holds (each
// batch is one DELETE, ROW EXCLUSIVE on the table like an INSERT, and the
// rows it locks are not the writer's), every row it inserts survives (it
// is after the recorded position), and the confirmed rows are all gone.
// The insert latencies and prune's batches are logged: README, Runbook,
// quotes them.
func TestPruneMillionRowsConcurrentWriter(t *testing.T) {
	t.Parallel()
	// A cluster of its own: every walsender of the server decodes the
	// million-row insert and delete, which would stall the other tests.
	f := ownFixture(t, 1)
	forgetPosition(t, f.Pool, f.Slot)
	ctx := context.Background()
	// Autovacuum's truncation of the emptied table takes ACCESS EXCLUSIVE
	// for a moment; it is not prune's lock, so it stays out of the sample.
	mustExec(t, f.Pool, fmt.Sprintf(`ALTER TABLE %s SET (autovacuum_enabled = false)`, f.Table))
	// Written before walpost creates the slot: never streamed, and
	// confirmed once the position records a later commit.
	mustExec(t, f.Pool, fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) SELECT 'old-' || g, '{"x": 1}' FROM generate_series(1, %d) g`, f.Table, pruneLoadRows))
	runThenStop(t, f, f, nil, "conf", 10)

	writer, err := pgx.Connect(ctx, f.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close(ctx)
	var writerPID int
	if err := writer.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&writerPID); err != nil {
		t.Fatal(err)
	}
	var (
		stop      atomic.Bool
		wg        sync.WaitGroup
		latencies []time.Duration
		written   int
		writeErr  error
		samples   atomic.Int64
		blocked   atomic.Int64 // samples where the writer waited on a heavyweight lock
		blockedBy sync.Map     // blocking pids seen
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		ins := fmt.Sprintf(`INSERT INTO %s (idempotency_key, payload) VALUES ($1, '{"x": 1}')`, f.Table)
		for !stop.Load() {
			start := time.Now()
			if _, err := writer.Exec(ctx, ins, fmt.Sprintf("live-%d", written)); err != nil {
				writeErr = err
				return
			}
			latencies = append(latencies, time.Since(start))
			written++
		}
	}()
	go func() {
		defer wg.Done()
		for !stop.Load() {
			var waiting bool
			var pids []int32
			err := f.Pool.QueryRow(ctx, `SELECT coalesce(wait_event_type = 'Lock', false), pg_blocking_pids($1) FROM pg_stat_activity WHERE pid = $1`, writerPID).Scan(&waiting, &pids)
			if err == nil {
				samples.Add(1)
				if waiting || len(pids) > 0 {
					blocked.Add(1)
					for _, p := range pids {
						blockedBy.Store(p, true)
					}
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()

	start := time.Now()
	out, code := recoveryCommand(t, append(f.env(), "WALPOST_RECOVER_MARGIN=0s"), "prune", "--older-than", "1ms")
	took := time.Since(start)
	stop.Store(true)
	wg.Wait()
	if code != 0 {
		t.Fatalf("prune: exit %d", code)
	}
	if writeErr != nil {
		t.Fatalf("writer: %v", writeErr)
	}
	if want := fmt.Sprintf("deleted:           %d row(s)", pruneLoadRows+10); !strings.Contains(out, want) {
		t.Errorf("prune report lacks %q", want)
	}

	slices.Sort(latencies)
	q := func(p float64) time.Duration {
		if len(latencies) == 0 {
			return 0
		}
		return latencies[min(len(latencies)-1, int(p*float64(len(latencies))))].Round(10 * time.Microsecond)
	}
	t.Logf("prune of %d rows took %s; writer: %d inserts meanwhile, latency p50 %s, p99 %s, p99.9 %s, max %s; lock-wait samples %d of %d",
		pruneLoadRows, took.Round(time.Millisecond), written, q(0.5), q(0.99), q(0.999), q(1), blocked.Load(), samples.Load())
	if written == 0 || samples.Load() == 0 {
		t.Fatalf("the writer inserted %d rows and the sampler took %d samples during prune: nothing was measured", written, samples.Load())
	}
	if n := blocked.Load(); n != 0 {
		var pids []any
		blockedBy.Range(func(k, _ any) bool { pids = append(pids, k); return true })
		t.Errorf("the writer waited on a lock in %d of %d samples during prune (blocking pids %v), want never", n, samples.Load(), pids)
	}
	var old, live int
	if err := f.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FILTER (WHERE idempotency_key NOT LIKE 'live-%%'), count(*) FILTER (WHERE idempotency_key LIKE 'live-%%') FROM %s`, f.Table)).Scan(&old, &live); err != nil {
		t.Fatal(err)
	}
	if old != 0 || live != written {
		t.Errorf("after prune: %d confirmed rows left (want 0), %d of the writer's %d rows (want all)", old, live, written)
	}
}
