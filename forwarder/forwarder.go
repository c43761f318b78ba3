package forwarder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/walpost/walpost/config"
	"github.com/walpost/walpost/internal/buildinfo"
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/poison"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/replication"
	"github.com/walpost/walpost/sink"
)

// Deps are what a Forwarder is given rather than builds; every field may be
// left zero.
type Deps struct {
	// Logger receives walpost's logs; nil discards them.
	Logger *slog.Logger
	// Registry receives walpost's metrics and is served on http.listen;
	// nil makes a registry of the forwarder's own (with the Go and process
	// collectors).
	Registry *prometheus.Registry
	// Sink receives the events. nil: the Kafka sink of cfg.Kafka, built by
	// Run after checking the default topic (created when
	// kafka.create_topic_partitions asks for it), with the Kafka client's
	// metrics on Registry. A given sink is not closed by the Forwarder.
	Sink sink.Sink
	// Build is exported as walpost_build_info; fields left empty come from
	// the binary's own build information (runtime/debug.ReadBuildInfo).
	Build Build
}

// Build identifies the running walpost in walpost_build_info.
type Build struct {
	Version string // e.g. v1.2.0
	Commit  string // the full commit hash
}

// Forwarder is walpost's pipeline: replication sessions from the slot
// through the isolator to the sink, restarted after recoverable failures,
// with metrics, health, the slot monitor and the heartbeat beside them.
// Create it with New and Run it once.
type Forwarder struct {
	cfg  *config.Config
	log  *slog.Logger
	reg  *prometheus.Registry
	m    *metrics
	sink sink.Sink
	own  bool // the sink is the forwarder's own (closed when Run returns)
	// version is walpost's (Deps.Build, else the binary's), in the
	// OTLP exporter's User-Agent.
	version string

	store *poison.Store
	pool  *pgxpool.Pool

	// tp and tracer make walpost's own spans (otel.enabled, otel.go);
	// nil without them.
	tp     trace.TracerProvider
	tracer trace.Tracer
	// retryFirst replaces the back-off's first wait between sessions
	// (1 s) when set, and bounds it at four times that; only tests set
	// it.
	retryFirst time.Duration
	// What one session leaves to the next.
	memory
}

// New prepares a Forwarder for cfg, which must be valid (config.Load or
// Config.Validate); it connects to nothing.
func New(cfg *config.Config, deps Deps) (*Forwarder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f := &Forwarder{cfg: cfg, log: deps.Logger, reg: deps.Registry, sink: deps.Sink}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	if f.reg == nil {
		f.reg = newRegistry()
	}
	f.registerMetrics(f.reg, deps.Build)
	return f, nil
}

// registerMetrics registers every walpost_* series the forwarder itself
// exports on reg (the Kafka client's walpost_kafka_* come with the sink).
func (f *Forwarder) registerMetrics(reg prometheus.Registerer, build Build) {
	f.m = newMetrics(reg)
	b := buildinfo.Resolve(build.Version, build.Commit, "")
	f.version = b.Version
	registerBuildInfo(reg, b.Version, b.Commit, b.GoVersion)
	registerReady(reg, f.ready)
}

// Confirmed is the position the current session may confirm to the slot:
// every event at or below it is acknowledged or quarantined (0 before the
// first session).
func (f *Forwarder) Confirmed() pglogrepl.LSN {
	if t := f.m.tracker.Load(); t != nil {
		return t.Confirmed()
	}
	return 0
}

// Run forwards until ctx ends (nil: the last session drained, confirmed what
// was acknowledged and flushed the sink) or a terminal error (see
// Classify). Its components run in one errgroup, each with an owner that
// waits for it: the HTTP server, the slot monitor, the heartbeat, the
// outbox prune (outbox.retention) and the session loop; the first failure stops them all.
func (f *Forwarder) Run(ctx context.Context) error {
	defer f.m.setState(stateStopped)
	srv, err := f.listenHTTP()
	if err != nil {
		return err
	}
	if f.cfg.OTel.Enabled {
		tp, err := newTracerProvider(ctx, f.cfg.OTel, os.Getenv, f.version, f.log)
		if err != nil {
			return err
		}
		// The spans batched at the end are sent before Run returns.
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := tp.Shutdown(sctx); err != nil {
				f.log.Warn("otel: the last spans were not exported", "err", err)
			}
		}()
		f.tp, f.tracer = tp, tp.Tracer("github.com/walpost/walpost/forwarder")
	}
	g, gctx := errgroup.WithContext(ctx)
	if srv != nil {
		g.Go(func() error { return srv.run(gctx) })
	}
	g.Go(func() error {
		err := f.forward(gctx)
		if err == nil && ctx.Err() == nil {
			err = errors.New("forwarding ended without an error or a shutdown")
		}
		return err
	})
	return g.Wait()
}

// forward opens the sink and the side pool, then runs sessions until ctx
// ends or one fails for good.
func (f *Forwarder) forward(ctx context.Context) error {
	cfg := f.cfg
	if eos(cfg) {
		// Each session builds its own transactional producer (openTxn).
		if f.sink != nil {
			return errors.New("delivery.mode exactly-once builds its own transactional Kafka producer: leave Deps.Sink nil")
		}
		if ok, err := f.waitKafka(ctx); !ok || err != nil {
			return err
		}
	} else if f.sink == nil {
		k, err := f.openKafka(ctx)
		if err != nil || k == nil {
			return err // k == nil: ctx ended while Kafka was unreachable
		}
		f.sink, f.own = k, true
	}
	if f.own {
		defer f.sink.Close()
	}
	// The poison table is written over its own pool, never over the
	// replication connection.
	pool, err := replication.NewPool(ctx, cfg.Postgres.URL)
	if err != nil {
		return redact.Error(fmt.Errorf("postgres.url: %w", err))
	}
	defer pool.Close()
	f.store = poison.NewStore(pool, cfg.Postgres.PoisonTable)
	f.pool = pool

	w := &watchers{cfg: cfg, log: f.log, m: f.m, pool: pool, ident: &f.ident}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { w.monitorSlot(gctx, 5*time.Second); return nil })
	g.Go(func() error { w.monitorStandbys(gctx, time.Second, 5*time.Second, 30*time.Second); return nil })
	g.Go(func() error { w.reportProgress(gctx, progressEvery); return nil })
	if every := cfg.Postgres.HeartbeatInterval; every > 0 {
		g.Go(func() error { w.heartbeat(gctx, every); return nil })
	}
	if cfg.Outbox.Retention > 0 {
		f.log.Info("outbox retention: confirmed rows older than the retention are deleted while walpost streams",
			"key", "outbox.retention", "table", cfg.Postgres.Table, "retention", cfg.Outbox.Retention.String(),
			"prune_interval", cfg.Outbox.PruneInterval.String(), "prune_batch", cfg.Outbox.PruneBatch, "recover_margin", cfg.Recover.Margin.String())
		g.Go(func() error { w.pruneOutbox(gctx, cfg.Outbox.PruneInterval, w.prunePass); return nil })
	}
	g.Go(func() error {
		err := f.sessions(gctx)
		if err == nil && ctx.Err() == nil {
			// Only a shutdown ends the loop without an error; stop the
			// monitor and the heartbeat all the same.
			return errors.New("session loop ended without a shutdown")
		}
		return err
	})
	return g.Wait()
}

// sessions runs replication sessions until ctx ends (nil) or one fails
// for good.
func (f *Forwarder) sessions(ctx context.Context) error {
	cfg := f.cfg
	b := newBackoff(30 * time.Second)
	if f.retryFirst > 0 {
		b.start, b.d, b.max = f.retryFirst, f.retryFirst, 4*f.retryFirst
	}
	// A stop drains within kafka.flush_timeout in total: the session's
	// drain and the final flush below share one deadline.
	stop := newStopClock(ctx, cfg.Kafka.FlushTimeout)
	defer stop.release()
	for {
		started := time.Now()
		acked := f.m.producedN.Load()
		err := f.newSession(stop).run(ctx)
		action, cause := Classify(ctx, err)
		switch action {
		case Stop:
			// Shutdown: the stream drained and confirmed; flush the rest
			// by what is left of the stop's deadline.
			if f.sink != nil {
				fctx, cancel := context.WithDeadline(context.Background(), stop.deadline())
				_ = f.sink.Flush(fctx)
				cancel()
			}
			// The isolator settles on through a stop, so a failure that
			// must end walpost (errBreaker, poison.ErrUnwritable) can
			// come during it: it is not a clean stop.
			if a, _ := Classify(context.Background(), err); err != nil && a == Fail {
				return err
			}
			return nil
		case Fail:
			return err
		}
		f.m.reconnects.WithLabelValues(cause).Inc()
		// A session that delivered events (Kafka acknowledged them) or ran
		// long resets the back-off: only failures in a row without progress
		// grow it. Not a moved confirmed LSN: walpost's own position write
		// and keepalives move it in a session that delivers nothing. A
		// standby waiting for the slot is not failing.
		b.after(f.m.producedN.Load() != acked, time.Since(started))
		if action == StandBy {
			b.streak = 0
		}
		f.m.failures.Store(int64(b.streak))
		var wait time.Duration
		switch action {
		case WaitForDestination:
			wait = b.next(30 * time.Second)
			f.m.setState(stateReconnecting)
			f.log.Error("forwarding stopped: fix the destination; walpost retries and resumes from the slot", "slot", cfg.Postgres.Slot, "err", redact.String(err.Error()), "retry_in", wait.String(), "failures_without_progress", b.streak)
		case StandBy:
			wait = b.next(5 * time.Second)
			f.m.setState(stateWaitingForSlot)
			f.log.Info("slot is held by another process; standing by", "slot", cfg.Postgres.Slot, "err", redact.String(err.Error()), "retry_in", wait.String())
		default:
			wait = b.next(30 * time.Second)
			f.m.setState(stateReconnecting)
			f.log.Warn("session failed; reconnecting", "slot", cfg.Postgres.Slot, "err", redact.String(err.Error()), "retry_in", wait.String(), "failures_without_progress", b.streak)
		}
		// Records of the failed session stay in the sink and keep their
		// per-partition order; wait for their outcomes before resuming from
		// the slot, so the next session starts with nothing in flight.
		if f.sink != nil {
			if err := f.sink.Flush(ctx); err != nil {
				return nil // ctx ended
			}
		}
		// Their acknowledgements moved the failed session's tracker: its
		// position is what the next session skips up to (INV-13); never
		// after a data loss, whose transactions are produced again.
		if f.pw != nil && cause != "kafka_data_loss" {
			f.pw.remember()
		}
		if !sleep(ctx, wait) {
			return nil
		}
	}
}

// watchers are the forwarder's goroutines beside the sessions: the slot
// and standby monitors, the progress report, the heartbeat and the outbox
// prune.
type watchers struct {
	cfg  *config.Config
	log  *slog.Logger
	m    *metrics
	pool *pgxpool.Pool
	// The identity the last session checked the position against (nil:
	// none); prune passes run only on it.
	ident *atomic.Pointer[position.Identity]
}

// eos says whether delivery.mode is exactly-once (DESIGN.md,
// "Exactly-once delivery").
func eos(cfg *config.Config) bool { return cfg.Delivery.Mode == config.ExactlyOnce }

// backoff doubles a wait from 1 s up to a ceiling and jitters it: each
// wait is drawn from [d/2, d]. It grows only over failures in a row
// without progress (streak counts them).
type backoff struct {
	start, d, max time.Duration
	streak        int
}

func newBackoff(max time.Duration) *backoff {
	return &backoff{start: time.Second, d: time.Second, max: max}
}

func (b *backoff) reset() { b.d, b.streak = b.start, 0 }

// backoffResetAfter: a session that ran this long counts as progress even
// when it confirmed nothing (a quiet outbox).
const backoffResetAfter = time.Minute

// after records how the session that just failed went: one that made
// progress (delivered events) or ran longer than backoffResetAfter starts
// the back-off afresh (streak 0), so a healthy session ended by the server
// (an idle_session_timeout, a restart) reconnects at once; a failure
// without progress adds to the streak, and the back-off keeps growing.
func (b *backoff) after(progressed bool, ran time.Duration) {
	if progressed || ran > backoffResetAfter {
		b.reset()
		return
	}
	b.streak++
}

// next returns the jittered current wait and doubles the wait for next
// time, up to ceiling (≤ the backoff's own ceiling).
func (b *backoff) next(ceiling time.Duration) time.Duration {
	d := b.d
	wait := d/2 + rand.N(d/2+1)
	b.d = min(d*2, ceiling, b.max)
	return wait
}
