package resend

import (
	"context"
	"time"
)

// pacer spaces rows at most rate per second (--max-rate): each row is due
// one interval after the previous one was due. A resend that fell behind
// (a sleep that overslept, Kafka or PostgreSQL slowing it down) catches up
// at most maxCredit worth of rows in a burst, so a stall is never made up
// by a burst above the rate for longer than that. It waits only once a row
// is due a millisecond or more ahead: sleeping for every row would cost
// more than the rows.
type pacer struct {
	interval time.Duration // 0: no limit
	next     time.Time
	now      func() time.Time
	sleep    func(context.Context, time.Duration) error
}

// maxCredit is how far behind its schedule the pacer may be and still
// catch up: timers oversleep by a millisecond or more, which without
// credit would cost a high rate most of its rows.
const maxCredit = 50 * time.Millisecond

func newPacer(rate float64) *pacer {
	p := &pacer{now: time.Now, sleep: sleepCtx}
	if rate > 0 {
		p.interval = time.Duration(float64(time.Second) / rate)
		if p.interval <= 0 {
			p.interval = 1
		}
	}
	return p
}

// pending is how long wait will sleep before the next row (0: none).
func (p *pacer) pending() time.Duration {
	if p.interval == 0 || p.next.IsZero() {
		return 0
	}
	return max(0, p.next.Sub(p.now()))
}

// wait returns when the next row may be produced, or with ctx's error.
func (p *pacer) wait(ctx context.Context) error {
	if p.interval == 0 {
		return nil
	}
	now := p.now()
	if p.next.IsZero() {
		p.next = now
	}
	if floor := now.Add(-maxCredit); p.next.Before(floor) {
		p.next = floor
	}
	due := p.next
	p.next = p.next.Add(p.interval)
	if d := due.Sub(now); d >= time.Millisecond {
		return p.sleep(ctx, d)
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
