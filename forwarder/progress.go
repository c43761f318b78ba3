package forwarder

import (
	"context"
	"log/slog"
	"math"
	"time"
)

// Catch-up progress (README "Logs"): while the slot has a backlog, one
// "catching up" line every progressEvery with the events acknowledged per
// second, the slot's lag and the estimated time to drain it, as Debezium's
// "N records sent during previous …" lines; one "caught up" line when the
// lag falls back under the threshold.
const (
	progressEvery = 10 * time.Second
	// progressLagBytes is the lag (server WAL position minus the slot's
	// confirmed LSN, as the slot monitor last measured it) from which the
	// slot counts as having a backlog: well above what one busy interval
	// of a caught-up forwarder leaves behind.
	progressLagBytes = 16 << 20
)

// progress turns the metrics' event counters and the slot monitor's lag
// into the catch-up lines. tick is called with the current time at each
// interval; the first call only takes the baseline.
type progress struct {
	log       *slog.Logger
	m         *metrics
	slot      string
	threshold int64

	started  bool
	at       time.Time
	produced uint64
	received uint64
	lag      int64 // -1: not measured at the last tick
	draining bool  // the last tick logged "catching up"
}

func newProgress(log *slog.Logger, m *metrics, slot string) *progress {
	return &progress{log: log, m: m, slot: slot, threshold: progressLagBytes, lag: -1}
}

// tick logs the interval that ended at now (see progress).
func (p *progress) tick(now time.Time) {
	produced, received, lag := p.m.producedN.Load(), p.m.receivedN.Load(), p.m.lagB.Load()
	prevAt, prevProduced, prevReceived, prevLag := p.at, p.produced, p.received, p.lag
	p.at, p.produced, p.received, p.lag = now, produced, received, lag
	if !p.started {
		p.started = true
		return
	}
	secs := now.Sub(prevAt).Seconds()
	if secs <= 0 {
		return
	}
	if lag < 0 { // not measured (no slot yet, or the side pool fails)
		return
	}
	if lag < p.threshold {
		if p.draining {
			p.draining = false
			p.log.Info("caught up", "slot", p.slot, "lag_bytes", lag)
		}
		return
	}
	sent := produced - prevProduced
	if sent == 0 && received == prevReceived && (prevLag < 0 || lag >= prevLag) {
		// Nothing flows and the lag does not shrink: not a backlog that
		// drains (a stalled one shows in walpost_confirmed_lsn and the
		// alerts).
		p.draining = false
		return
	}
	p.draining = true
	eta := "unknown" // the lag does not shrink (yet)
	if prevLag >= 0 && lag < prevLag {
		rate := float64(prevLag-lag) / secs // bytes of lag drained per second
		eta = (time.Duration(math.Ceil(float64(lag)/rate)) * time.Second).String()
	}
	p.log.Info("catching up", "slot", p.slot,
		"events_sent", sent,
		"interval", now.Sub(prevAt).Round(time.Millisecond).String(),
		"events_per_second", math.Round(float64(sent)/secs*10)/10,
		"lag_bytes", lag,
		"eta", eta)
}

// reportProgress ticks p every interval until ctx ends.
func (w *watchers) reportProgress(ctx context.Context, every time.Duration) {
	p := newProgress(w.log, w.m, w.cfg.Postgres.Slot)
	t := time.NewTicker(every)
	defer t.Stop()
	p.tick(time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			p.tick(now)
		}
	}
}
