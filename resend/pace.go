package resend

import (
	"context"
	"time"
)

// pacer spaces rows at most rate per second (--max-rate): each row is due
// one interval after the previous one was due, or now when the resend fell
// behind (Kafka or PostgreSQL slowed it down), so a stall is never made up
// by a burst above the rate. It waits only once a row is due a millisecond
// or more ahead: sleeping for every row would cost more than the rows.
type pacer struct {
	interval time.Duration // 0: no limit
	next     time.Time
	now      func() time.Time
	sleep    func(context.Context, time.Duration) error
}

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

// wait returns when the next row may be produced, or with ctx's error.
func (p *pacer) wait(ctx context.Context) error {
	if p.interval == 0 {
		return nil
	}
	now := p.now()
	if p.next.Before(now) {
		p.next = now
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
