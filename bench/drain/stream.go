package main

// The stream-alone baseline: walpost's pipeline (forwarder.New, the same
// composition `walpost run` runs: read, decode, build the events, the
// isolator, checkpoint tracking and status updates) draining its own slot
// into sink.Discard, which acknowledges each event as soon as it is
// handed on: no Kafka. It runs in a child process (this binary with
// -stream-only) with walpost's runtime settings, so its CPU time and peak
// RSS are read from /proc like walpost's. Next to the raw producer it
// splits walpost's CPU into its PostgreSQL half and its Kafka half.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/forwarder"
	"github.com/walpost/walpost/outbox"
	"github.com/walpost/walpost/sink"
)

// streamSpec is the child's job, passed as JSON in -stream-only.
type streamSpec struct {
	URL         string `json:"url"`
	Slot        string `json:"slot"`
	Publication string `json:"publication"`
	Table       string `json:"table"`
	EndLSN      string `json:"end_lsn"`
}

// streamReport is the child's "done" line.
type streamReport struct {
	Events int64 `json:"events"`
	WallNs int64 `json:"wall_ns"` // process start → every event up to the end LSN released
}

type streamResult struct {
	wall       time.Duration
	cpuSecs    float64 // utime+stime of the child, start-up included
	userSecs   float64
	walsndSecs float64 // its walsender's CPU, last 50 ms sample (-1: unknown)
	busySecs   float64
	kafkaSecs  float64
	hwmKiB     int64
}

// runStreamAlone re-executes this binary to drain slot with walpost's
// stream and no Kafka, and checks it saw want events.
func (e *env) runStreamAlone(ctx context.Context, table, publication, slot string, endLSN pglogrepl.LSN, want int64) (streamResult, error) {
	var res streamResult
	busy0, kafka0 := machineBusy(), e.f.kafkaCPU()
	c, err := e.startChild(ctx, "-stream-only", streamSpec{
		URL: e.f.pgURL, Slot: slot, Publication: publication, Table: table, EndLSN: endLSN.String(),
	})
	if err != nil {
		return res, fmt.Errorf("stream alone: %w", err)
	}
	fail := func(err error) (streamResult, error) {
		c.kill()
		return res, fmt.Errorf("stream alone: %w", err)
	}
	stopSampling := e.f.sampleWalsender(ctx, slot)
	var rep streamReport
	err = c.done(&rep)
	res.walsndSecs = stopSampling()
	if err != nil {
		return fail(err)
	}
	res.busySecs, res.kafkaSecs = machineBusy()-busy0, since(kafka0, e.f.kafkaCPU())
	pid := c.cmd.Process.Pid
	if res.cpuSecs, res.userSecs, err = procCPUSplit(pid); err != nil {
		return fail(err)
	}
	if _, res.hwmKiB, err = procMem(pid); err != nil {
		return fail(err)
	}
	if err := c.finish(); err != nil {
		return res, fmt.Errorf("stream alone: %w", err)
	}
	res.wall = time.Duration(rep.WallNs)
	if rep.Events != want {
		return res, fmt.Errorf("stream alone: decoded %d events, want %d", rep.Events, want)
	}
	return res, nil
}

// streamChild is the -stream-only process.
func streamChild(specJSON string) error {
	start := time.Now()
	var spec streamSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return err
	}
	end, err := pglogrepl.ParseLSN(spec.EndLSN)
	if err != nil {
		return err
	}
	cfg, err := walpostConfig()
	if err != nil {
		return err
	}
	cfg.Postgres.URL, cfg.Postgres.Slot, cfg.Postgres.Publication, cfg.Postgres.Table = spec.URL, spec.Slot, spec.Publication, spec.Table
	cfg.HTTP.Listen = ""
	log := slog.New(slog.DiscardHandler)
	// What `walpost run` sets unless GOMAXPROCS / GOMEMLIMIT are given.
	forwarder.ApplyMemoryLimit(cfg, log)
	forwarder.ApplyProcs(log)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var counted countingSink
	f, err := forwarder.New(cfg, forwarder.Deps{Logger: log, Sink: &counted})
	if err != nil {
		return err
	}
	var wall time.Duration
	reached := make(chan struct{})
	go func() {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if f.Confirmed() >= end {
				wall = time.Since(start)
				close(reached)
				cancel()
				return
			}
		}
	}()
	err = f.Run(ctx)
	select {
	case <-reached:
	default:
		if err == nil {
			err = errors.New("the forwarder ended before the end LSN")
		}
		return err
	}
	b, _ := json.Marshal(streamReport{Events: counted.n.Load(), WallNs: wall.Nanoseconds()})
	fmt.Println("done", string(b))
	// Stay alive until the parent has read CPU and memory from /proc.
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// countingSink is sink.Discard, counting the events.
type countingSink struct{ n atomic.Int64 }

func (c *countingSink) Produce(ev *outbox.Event, a sink.Acker) {
	c.n.Add(1)
	sink.Discard.Produce(ev, a)
}
func (c *countingSink) Flush(ctx context.Context) error { return sink.Discard.Flush(ctx) }
func (c *countingSink) Close()                          {}
