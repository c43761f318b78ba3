package forwarder

import (
	"context"
	"errors"
	"time"

	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/position"
	"github.com/walpost/walpost/prune"
)

// errNoSession: no replication session of this process runs with
// walpost's position checked against the server's identity (before the
// first, between two, or standing by for a slot another process holds),
// so a prune pass waits.
var errNoSession = errors.New("no replication session has checked the position yet")

// sessionIdentity is the identity a running session checked, and its end.
type sessionIdentity struct {
	id   position.Identity
	done chan struct{} // closed when the session ends
}

// prunePass is one prune of the outbox (Forwarder.prunePass); the rows it
// deleted are in the report, also when it failed part way.
type prunePass func(ctx context.Context) (*prune.Report, error)

// pruneOutbox runs pass every interval until ctx ends (outbox.retention).
// A failed pass is counted and logged with the key and never ends
// anything: forwarding goes on, and the next pass tries again.
func (f *Forwarder) pruneOutbox(ctx context.Context, every time.Duration, pass prunePass) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rep, err := pass(ctx)
		if rep != nil && rep.Deleted > 0 {
			f.m.pruned.Add(float64(rep.Deleted))
		}
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return // stopping: a batch cut short is rolled back
		case errors.Is(err, errNoSession), errors.Is(err, prune.ErrNothingConfirmed):
			f.log.Debug("outbox prune waits", "key", "outbox.retention", "slot", f.cfg.Postgres.Slot, "reason", redact.String(err.Error()))
		default:
			f.m.pruneErrors.Inc()
			deleted := 0
			if rep != nil {
				deleted = rep.Deleted
			}
			f.log.Warn("outbox prune failed; forwarding goes on and the next pass tries again",
				"key", "outbox.retention", "slot", f.cfg.Postgres.Slot, "deleted", deleted,
				"retry_in", every.String(), "err", redact.String(err.Error()))
		}
	}
}

// prunePass prunes once over a connection of the side pool (never the
// replication connection), on the identity the running session verified;
// the pass ends (its batch rolled back) when that session ends.
func (f *Forwarder) prunePass(ctx context.Context) (*prune.Report, error) {
	sid := f.ident.Load()
	if sid == nil {
		return nil, errNoSession
	}
	select {
	case <-sid.done:
		return nil, errNoSession
	default:
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-sid.done:
			cancel(errNoSession)
		case <-ctx.Done():
		}
	}()
	rep, err := f.prunePassOn(ctx, sid.id)
	if err != nil && errors.Is(context.Cause(ctx), errNoSession) {
		err = errNoSession // the session ended: this pass's batch rolled back
	}
	return rep, err
}

func (f *Forwarder) prunePassOn(ctx context.Context, id position.Identity) (*prune.Report, error) {
	c, err := f.pool.Acquire(ctx)
	if err != nil {
		return nil, redact.Error(err)
	}
	defer c.Release()
	p := &prune.Pruner{Config: f.cfg, Logger: f.log}
	return p.Pass(ctx, c.Conn(), id, prune.Options{OlderThan: f.cfg.Outbox.Retention, Batch: f.cfg.Outbox.PruneBatch})
}
